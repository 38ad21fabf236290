#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| dovetail::fuzzing::cron(data));
