"""The built-in tiny models (rft-tiny, its reward model and its tool-calling model), built
offline from a fixed seed: what tests, the demo and the benches train without a model hub."""
