"""OpenAI-compatible chat and text completions from base models and trained adapters."""
