//! The `--layout` TOML file: parsed into a [`LayoutSpec`] with every value typed and every
//! unknown key or name refused. Whether the layout obeys the WDDM rules is
//! [`crate::layout::rules`]'s business.

use serde::Deserialize;
use wddm_gpu_abi::build::gpuva::{gpummu_caps, with_table_segment};
use wddm_gpu_abi::caps::{WDDM_GPU_WDDM_1_3, WDDM_GPU_WDDM_2_0};
use wddm_gpu_abi::gpuva::{
    WddmGpuMmuCaps, GPUMMU_CAP_NAMES, PAGE_TABLE_UPDATE_MODE_NAMES,
    WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
};
use wddm_gpu_abi::segment_flags::{SegmentFlags, SEGMENT_FLAG_NAMES};

use crate::layout::link::LinkSpec;
use crate::layout::DEFAULT_PAGING_BUFFER_SIZE;
use crate::support::size::parse_size;

/// A layout file's content, typed but not yet checked against the WDDM rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayoutSpec {
    /// `WDDM_GPU_WDDM_*`.
    pub wddm_version: u32,
    /// `PagingBufferSegmentId`.
    pub paging_buffer_segment_id: u32,
    /// `PagingBufferSize`.
    pub paging_buffer_size: u64,
    /// `PagingBufferPrivateDataSize`.
    pub paging_buffer_private_data_size: u64,
    /// Segments in file order (segment ids 1, 2, ...).
    pub segments: Vec<SegmentSpec>,
    /// The `[gpummu]` table: the GpuMmu geometry as `DXGK_GPUMMUCAPS` and the level
    /// descriptors will report it (sizes derived from the index bits).
    pub gpummu: Option<WddmGpuMmuCaps>,
    /// `[link] model = "..."`: the link model (`--link` replaces it).
    pub link: Option<LinkSpec>,
}

/// One `[[segments]]` table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentSpec {
    /// `DXGK_SEGMENTFLAGS.Value`, possibly with bits no member names.
    pub flags: u32,
    /// `Size`.
    pub size: u64,
    /// `BaseAddress` (default 0).
    pub base_address: u64,
    /// Offset in the VRAM BAR (`CpuVisible` only); default: packed in file order.
    pub bar_offset: Option<u64>,
    /// `CommitLimit` (default: `size`).
    pub commit_limit: Option<u64>,
    /// Bank end offsets as written (the last may be omitted).
    pub banks: Option<Vec<u64>>,
    /// `SystemMemoryEndAddress` (default 0).
    pub system_memory_end_address: u64,
}

/// Why a layout file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LayoutFileError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, an unknown key, or a value of the wrong type, on one line: where it is and
    /// toml's message (which names the key).
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        /// 1-based line of the error's start.
        line: usize,
        /// 1-based column (in characters) of the error's start.
        column: usize,
        /// toml's message, its lines joined.
        message: String,
    },
    /// A value is of the right type but not acceptable.
    #[error("{field}: {message}")]
    Value {
        /// Dotted path of the key, e.g. `segments[1].size`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLayout {
    wddm: Option<String>,
    paging_buffer_segment: Option<RawNumber>,
    paging_buffer_size: Option<RawNumber>,
    paging_buffer_private_data_size: Option<RawNumber>,
    #[serde(default)]
    segments: Vec<RawSegment>,
    gpummu: Option<RawGpuMmu>,
    link: Option<RawLink>,
}

/// `[link]`: the model, in `--link`'s words.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLink {
    model: String,
}

/// `[gpummu]`: per-level lists run leaf first (level 0).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpuMmu {
    index_bits: Vec<u32>,
    update_mode: Option<String>,
    flags: Option<RawFlags>,
    table_segments: Option<Vec<u32>>,
    paging_process_table_segments: Option<Vec<u32>>,
    max_contexts: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSegment {
    flags: RawFlags,
    size: RawNumber,
    base_address: Option<RawNumber>,
    bar_offset: Option<RawNumber>,
    commit_limit: Option<RawNumber>,
    banks: Option<Vec<RawNumber>>,
    system_memory_end_address: Option<RawNumber>,
}

/// A size or address: a TOML integer (decimal or 0x hex) or a string such as "64KiB".
#[derive(Deserialize)]
#[serde(untagged)]
enum RawNumber {
    Integer(i64),
    Text(String),
}

/// Flags: a list of `DXGK_SEGMENTFLAGS` member names, or the raw `Value` as an integer.
#[derive(Deserialize)]
#[serde(untagged)]
enum RawFlags {
    Names(Vec<String>),
    Value(i64),
}

impl RawNumber {
    fn value(&self, field: &str) -> Result<u64, LayoutFileError> {
        let value_error = |message: String| LayoutFileError::Value {
            field: field.to_string(),
            message,
        };
        match self {
            RawNumber::Integer(value) => {
                u64::try_from(*value).map_err(|_| value_error(format!("{value} is negative")))
            }
            RawNumber::Text(text) => parse_size(text).map_err(value_error),
        }
    }
}

fn optional(raw: &Option<RawNumber>, field: &str) -> Result<Option<u64>, LayoutFileError> {
    raw.as_ref().map(|raw| raw.value(field)).transpose()
}

fn u32_field(raw: &Option<RawNumber>, field: &str, default: u32) -> Result<u32, LayoutFileError> {
    match optional(raw, field)? {
        None => Ok(default),
        Some(value) => u32::try_from(value).map_err(|_| LayoutFileError::Value {
            field: field.to_string(),
            message: format!("{value:#x} does not fit the 32-bit DXGK field"),
        }),
    }
}

fn flags_value(raw: &RawFlags, field: &str) -> Result<u32, LayoutFileError> {
    match raw {
        RawFlags::Value(value) => u32::try_from(*value).map_err(|_| LayoutFileError::Value {
            field: field.to_string(),
            message: format!("{value:#x} is not a 32-bit DXGK_SEGMENTFLAGS value"),
        }),
        RawFlags::Names(names) => names.iter().try_fold(0u32, |value, name| {
            let flag = SegmentFlags::from_member_name(name).ok_or_else(|| {
                let known: Vec<&str> = SEGMENT_FLAG_NAMES.iter().map(|(n, _)| *n).collect();
                LayoutFileError::Value {
                    field: field.to_string(),
                    message: format!(
                        "unknown DXGK_SEGMENTFLAGS member {name:?} (members: {})",
                        known.join(", ")
                    ),
                }
            })?;
            Ok(value | flag.bits())
        }),
    }
}

fn gpummu_value(raw: &RawGpuMmu) -> Result<WddmGpuMmuCaps, LayoutFileError> {
    let value_error = |field: &str, message: String| LayoutFileError::Value {
        field: format!("gpummu.{field}"),
        message,
    };
    let update_mode = match raw.update_mode.as_deref() {
        None => WDDM_GPU_PAGE_TABLE_UPDATE_GPU_PHYSICAL,
        Some(name) => PAGE_TABLE_UPDATE_MODE_NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, mode)| *mode)
            .ok_or_else(|| {
                value_error(
                    "update_mode",
                    format!("{name:?} is not cpu_virtual, gpu_virtual or gpu_physical"),
                )
            })?,
    };
    // The level count is checked by the rules; lists longer than the caps hold are refused here.
    let levels = raw.index_bits.len();
    let mut caps = gpummu_caps(&raw.index_bits, update_mode);
    if levels > caps.levels.len() {
        return Err(value_error(
            "index_bits",
            format!("{levels} levels, more than DXGK_MAX_PAGE_TABLE_LEVEL_COUNT (6)"),
        ));
    }
    if let Some(flags) = &raw.flags {
        caps.flags = match flags {
            RawFlags::Value(value) => u32::try_from(*value).map_err(|_| {
                value_error(
                    "flags",
                    format!("{value:#x} is not a 32-bit DXGK_GPUMMUCAPS value"),
                )
            })?,
            RawFlags::Names(names) => names.iter().try_fold(0u32, |bits, name| {
                let (_, bit) = GPUMMU_CAP_NAMES
                    .iter()
                    .find(|(known, _)| known == name)
                    .ok_or_else(|| {
                        let known: Vec<&str> = GPUMMU_CAP_NAMES.iter().map(|(n, _)| *n).collect();
                        value_error(
                            "flags",
                            format!(
                                "{name:?} is not a DXGK_GPUMMUCAPS member the device honours ({})",
                                known.join(", ")
                            ),
                        )
                    })?;
                Ok(bits | bit)
            })?,
        };
    }
    if let Some(segments) = &raw.table_segments {
        if segments.len() != levels {
            return Err(value_error(
                "table_segments",
                format!("{} entries for {levels} levels", segments.len()),
            ));
        }
        for (level, &segment) in segments.iter().enumerate() {
            caps = with_table_segment(caps, level, segment);
        }
    }
    if let Some(segments) = &raw.paging_process_table_segments {
        if segments.len() != levels {
            return Err(value_error(
                "paging_process_table_segments",
                format!("{} entries for {levels} levels", segments.len()),
            ));
        }
        for (desc, &segment) in caps.levels.iter_mut().zip(segments) {
            desc.paging_process_page_table_segment_id = segment;
        }
    }
    if let Some(max_contexts) = raw.max_contexts {
        caps.max_contexts = max_contexts;
    }
    Ok(caps)
}

/// toml's error as one line: its multi-line rendering quotes the source, which a log line and
/// a terminal message should not.
fn syntax_error(text: &str, error: &toml::de::Error) -> LayoutFileError {
    let start = error.span().map_or(0, |span| span.start).min(text.len());
    let before = text.get(..start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    let message = error
        .message()
        .lines()
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    LayoutFileError::Syntax {
        line,
        column,
        message,
    }
}

/// Parses layout-file text.
pub fn parse_layout(text: &str) -> Result<LayoutSpec, LayoutFileError> {
    let raw: RawLayout = toml::from_str(text).map_err(|error| syntax_error(text, &error))?;
    let wddm_version = match raw.wddm.as_deref() {
        None | Some("1.3") => WDDM_GPU_WDDM_1_3,
        Some("2.0") => WDDM_GPU_WDDM_2_0,
        Some(other) => {
            return Err(LayoutFileError::Value {
                field: "wddm".to_string(),
                message: format!(
                    "{other:?} is not a supported version: \"1.3\" (DXGK_SEGMENTDESCRIPTOR3) or \"2.0\" (DXGK_SEGMENTDESCRIPTOR4)"
                ),
            })
        }
    };
    let segments = raw
        .segments
        .iter()
        .enumerate()
        .map(|(index, segment)| {
            let at = |key: &str| format!("segments[{index}].{key}");
            Ok(SegmentSpec {
                flags: flags_value(&segment.flags, &at("flags"))?,
                size: segment.size.value(&at("size"))?,
                base_address: optional(&segment.base_address, &at("base_address"))?.unwrap_or(0),
                bar_offset: optional(&segment.bar_offset, &at("bar_offset"))?,
                commit_limit: optional(&segment.commit_limit, &at("commit_limit"))?,
                banks: segment
                    .banks
                    .as_ref()
                    .map(|banks| {
                        banks
                            .iter()
                            .enumerate()
                            .map(|(bank, raw)| raw.value(&at(&format!("banks[{bank}]"))))
                            .collect::<Result<Vec<u64>, _>>()
                    })
                    .transpose()?,
                system_memory_end_address: optional(
                    &segment.system_memory_end_address,
                    &at("system_memory_end_address"),
                )?
                .unwrap_or(0),
            })
        })
        .collect::<Result<Vec<_>, LayoutFileError>>()?;
    Ok(LayoutSpec {
        wddm_version,
        paging_buffer_segment_id: u32_field(
            &raw.paging_buffer_segment,
            "paging_buffer_segment",
            0,
        )?,
        paging_buffer_size: optional(&raw.paging_buffer_size, "paging_buffer_size")?
            .unwrap_or(u64::from(DEFAULT_PAGING_BUFFER_SIZE)),
        paging_buffer_private_data_size: optional(
            &raw.paging_buffer_private_data_size,
            "paging_buffer_private_data_size",
        )?
        .unwrap_or(0),
        segments,
        gpummu: raw.gpummu.as_ref().map(gpummu_value).transpose()?,
        link: raw
            .link
            .as_ref()
            .map(|link| {
                LinkSpec::parse(&link.model).map_err(|error| LayoutFileError::Value {
                    field: "link.model".to_string(),
                    message: error.to_string(),
                })
            })
            .transpose()?,
    })
}

/// Reads and parses a layout file.
pub fn read_layout(path: &std::path::Path) -> Result<LayoutSpec, LayoutFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| LayoutFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_layout(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        // The example docs/layouts.md shows (device/tests/docs.rs holds the two equal).
        let spec = parse_layout(include_str!("../../../docs/layout-example.toml")).unwrap();
        assert_eq!(spec.wddm_version, WDDM_GPU_WDDM_1_3);
        assert_eq!(spec.paging_buffer_size, 64 << 10);
        assert_eq!(spec.segments.len(), 2);
        assert_eq!(spec.segments[0].flags, 0x4 | 0x400 | 0x80);
        assert_eq!(spec.segments[0].banks, Some(vec![64 << 20, 128 << 20]));
        assert_eq!(spec.segments[1].flags, 0x11);
        assert_eq!(spec.segments[1].size, 512 << 20);
        assert_eq!(spec.segments[1].commit_limit, None);
    }

    #[test]
    fn refuses_unknown_keys_names_versions_and_bad_values() {
        let cases = [
            ("colour = 1", "unknown field"),
            (
                "[[segments]]\nflags = []\nsize = 1\nsize_mb = 2",
                "unknown field",
            ),
            (
                "[[segments]]\nflags = [\"Apperture\"]\nsize = 4096",
                "segments[0].flags: unknown DXGK_SEGMENTFLAGS member \"Apperture\"",
            ),
            ("wddm = \"1.1\"", "wddm: \"1.1\" is not a supported version"),
            (
                "[[segments]]\nflags = []\nsize = -4096",
                "segments[0].size: -4096 is negative",
            ),
            (
                "[[segments]]\nflags = []\nsize = \"12 parsecs\"",
                "segments[0].size",
            ),
            (
                "[[segments]]\nflags = []\nsize = 4096\nbanks = [\"1MiB\", \"2XB\"]",
                "segments[0].banks[1]",
            ),
            (
                "paging_buffer_segment = 0x100000000",
                "paging_buffer_segment: 0x100000000 does not fit",
            ),
            (
                "[[segments]]\nflags = 0x1_0000_0000\nsize = 4096",
                "segments[0].flags",
            ),
            ("[[segments]]\nsize = 4096", "missing field `flags`"),
        ];
        for (text, expected) in cases {
            let message = parse_layout(text).unwrap_err().to_string();
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn a_gpummu_table_becomes_the_caps_it_describes() {
        let spec = parse_layout(
            r#"
            wddm = "2.0"
            [[segments]]
            flags = ["CpuVisible"]
            size = "16MiB"
            [gpummu]
            index_bits = [9, 9, 9]
            update_mode = "cpu_virtual"
            flags = ["ReadOnlyMemorySupported", "ZeroInPteSupported"]
            table_segments = [1, 0, 0]
            max_contexts = 8
            "#,
        )
        .unwrap();
        let caps = spec.gpummu.unwrap();
        assert_eq!(caps.page_table_level_count, 3);
        assert_eq!(caps.virtual_address_bit_count, 39);
        assert_eq!(caps.page_table_update_mode, 0);
        assert_eq!(caps.flags, 0b101);
        assert_eq!(caps.max_contexts, 8);
        assert_eq!(caps.levels[0].page_table_segment_id, 1);
        assert_eq!(caps.levels[0].paging_process_page_table_segment_id, 1);
        assert_eq!(caps.levels[2].page_table_size_in_bytes, 4096);
        assert_eq!(caps.levels[3], Default::default());
        assert!(parse_layout("").unwrap().gpummu.is_none());
    }

    #[test]
    fn gpummu_values_are_refused_by_name() {
        let cases = [
            ("[gpummu]\nindex_bits = [9, 9]\nupdate_mode = \"dma\"", "gpummu.update_mode: \"dma\""),
            (
                "[gpummu]\nindex_bits = [9, 9]\nflags = [\"DualPteSupported\"]",
                "gpummu.flags: \"DualPteSupported\" is not a DXGK_GPUMMUCAPS member the device honours",
            ),
            (
                "[gpummu]\nindex_bits = [9, 9]\ntable_segments = [0]",
                "gpummu.table_segments: 1 entries for 2 levels",
            ),
            (
                "[gpummu]\nindex_bits = [9, 9]\npaging_process_table_segments = [0, 0, 0]",
                "gpummu.paging_process_table_segments: 3 entries for 2 levels",
            ),
            ("[gpummu]\nindex_bits = [1, 1, 1, 1, 1, 1, 1]", "gpummu.index_bits: 7 levels"),
            ("[gpummu]\nindex_bits = [9, 9]\nroot = 1", "unknown field"),
            ("[gpummu]\nupdate_mode = \"gpu_physical\"", "missing field `index_bits`"),
        ];
        for (text, expected) in cases {
            let message = parse_layout(text).unwrap_err().to_string();
            assert!(message.contains(expected), "{text:?}: {message}");
        }
    }

    #[test]
    fn flags_may_be_a_raw_value() {
        let spec = parse_layout("[[segments]]\nflags = 0x80000011\nsize = 4096").unwrap();
        assert_eq!(spec.segments[0].flags, 0x8000_0011);
    }
}
