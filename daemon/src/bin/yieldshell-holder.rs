//! `yieldshell-holder`: the per-process holder (DESIGN §10), started by `yieldshelld` for each
//! managed process. The same code as `yieldshelld hold` (`yieldshelld::holder::serve`), in a
//! binary that links nothing else, so each held process costs little memory.

fn main() -> std::process::ExitCode {
    yieldshelld::holder::serve::main()
}
