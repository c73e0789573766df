//! The eventfd echo the benchmark measures its latency limit against: a bare eventfd round
//! trip into this process, waited for the way the vring workers wait (epoll).
