fn main() {
    eprintln!("jadpo: the command line arrives with issue 6");
    std::process::exit(2);
}
