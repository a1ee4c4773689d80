"""The SDK's version: its own module, so that the transport (which names it in User-Agent)
imports it without importing the whole package."""

__version__ = "0.1.0"
