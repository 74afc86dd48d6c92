//! `soak`: thousands of short connect / play / disconnect cycles against a roomd you run
//! yourself, sampling the server's memory, to show whether it stays flat over time. A
//! documented command, not a CI test: see the "Soak" section of `benches/README.md`; the
//! soak itself is [`benches::soak`].
//!
//! Only point it at servers you run: it connects to `--url` and nowhere else.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = benches::soak::parse_args(&args).and_then(|a| {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(benches::soak::soak(a))
    });
    match result {
        Ok(code) => std::process::ExitCode::from(code),
        Err(e) => {
            eprintln!("soak: {e:#}");
            std::process::ExitCode::from(3)
        }
    }
}
