//! Tests of the link spec's grammar and presets.

use std::time::Duration;

use super::*;

fn spec(text: &str) -> LinkSpec {
    LinkSpec::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"))
}

#[test]
fn presets_are_the_pcie_data_rates_and_keys_replace_their_assumptions() {
    let gen4 = spec("pcie4x16");
    // 16 GT/s × 128/130 / 8 bits, 16 lanes.
    assert_eq!(gen4.bandwidth, 1_969_230_769 * 16);
    assert_eq!(gen4.latency, Duration::from_micros(1));
    assert_eq!(gen4.page_overhead, Duration::from_nanos(20));
    assert_eq!(gen4.vram_bandwidth, None);
    assert_eq!(spec("pcie1x1").bandwidth, 250_000_000);
    assert_eq!(spec("pcie2x4").bandwidth, 2_000_000_000);
    assert_eq!(spec("pcie3x8").bandwidth, 7_876_923_072);

    let tuned = spec("pcie3x16, latency=2us, vram=448GB/s");
    assert_eq!(tuned.latency, Duration::from_micros(2));
    assert_eq!(tuned.vram_bandwidth, Some(448_000_000_000));
    assert_eq!(
        tuned.to_string(),
        "pcie3x16: 15.75 GB/s, 2µs a transfer, 20ns a page, VRAM 448.0 GB/s"
    );

    let custom = spec("bandwidth=12.5GiB/s");
    assert_eq!(custom.bandwidth, 25 << 29);
    assert_eq!(spec("bandwidth=1.5KB/s").bandwidth, 1500);
    assert_eq!(
        custom.latency,
        Duration::ZERO,
        "a custom link assumes nothing"
    );
    assert_eq!(custom.page_overhead, Duration::ZERO);
}

#[test]
fn bad_specs_name_the_word_and_the_rule() {
    for (text, expected) in [
        ("pcie6x16", LinkSpecError::UnknownWord("pcie6x16".into())),
        ("pcie4x3", LinkSpecError::UnknownWord("pcie4x3".into())),
        (
            "speed=1GB/s",
            LinkSpecError::UnknownWord("speed=1GB/s".into()),
        ),
        ("latency=1us", LinkSpecError::NoBandwidth),
        ("", LinkSpecError::NoBandwidth),
        (
            "bandwidth=12GB",
            LinkSpecError::BadRate {
                key: "bandwidth",
                value: "12GB".into(),
            },
        ),
        (
            "bandwidth=-1GB/s",
            LinkSpecError::BadRate {
                key: "bandwidth",
                value: "-1GB/s".into(),
            },
        ),
        (
            "bandwidth=1.2.3GB/s",
            LinkSpecError::BadRate {
                key: "bandwidth",
                value: "1.2.3GB/s".into(),
            },
        ),
        (
            "bandwidth=.5GB/s",
            LinkSpecError::BadRate {
                key: "bandwidth",
                value: ".5GB/s".into(),
            },
        ),
        (
            "bandwidth=0GB/s",
            LinkSpecError::RateOutOfRange {
                key: "bandwidth",
                value: "0GB/s".into(),
            },
        ),
        (
            "pcie4x16,vram=1000TB/s",
            LinkSpecError::RateOutOfRange {
                key: "vram",
                value: "1000TB/s".into(),
            },
        ),
        (
            "pcie4x16,latency=soon",
            LinkSpecError::BadDuration {
                key: "latency",
                value: "soon".into(),
            },
        ),
        (
            "pcie4x16,page=2s",
            LinkSpecError::DurationOutOfRange {
                key: "page",
                value: "2s".into(),
            },
        ),
        ("pcie4x16,pcie3x16", LinkSpecError::Repeated("a preset")),
        (
            "bandwidth=1GB/s,bandwidth=2GB/s",
            LinkSpecError::Repeated("bandwidth"),
        ),
    ] {
        assert_eq!(LinkSpec::parse(text), Err(expected), "{text}");
    }
}

#[test]
fn a_layout_file_names_its_link_in_the_same_words() {
    use crate::layout::file::parse_layout;
    use crate::layout::rules::validate;

    let text = "[[segments]]\nflags = [\"CpuVisible\"]\nsize = \"64MiB\"\n\n\
                [link]\nmodel = \"pcie4x8, vram=256GB/s\"\n";
    let spec = parse_layout(text).unwrap();
    let layout = validate(&spec, 64 << 20).unwrap();
    let link = layout.link.expect("the layout keeps its link");
    assert_eq!(link.bandwidth, 1_969_230_769 * 8);
    assert_eq!(link.vram_bandwidth, Some(256_000_000_000));
    assert!(parse_layout("").unwrap().link.is_none());

    let error = parse_layout("[link]\nmodel = \"pcie4x16,page=1h\"\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "link.model: page: a duration must be at most 1 s, not \"1h\""
    );
    let error = parse_layout("[link]\nspeed = \"fast\"\n").unwrap_err();
    assert!(error.to_string().contains("speed"), "{error}");
}
