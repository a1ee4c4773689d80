"""The inference server: a process of its own that keeps models loaded and generates."""
