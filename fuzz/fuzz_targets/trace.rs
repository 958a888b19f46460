//! CSV arrival traces, from raw bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = irqsim::fuzz::trace_case(data);
});
