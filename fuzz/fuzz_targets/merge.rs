//! `irqsim merge` inputs: the bytes, split at 0xff, are the shards' points.jsonl.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let shards: Vec<&[u8]> = data.split(|&b| b == 0xff).take(4).collect();
    let _ = irqsim::fuzz::merge_case(&shards, &std::env::temp_dir());
});
