fn main() {
    eprintln!("gpuchain: the node is not built yet");
    std::process::exit(2);
}
