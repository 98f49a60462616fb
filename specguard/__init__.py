"""specguard: a pytest-based performance regression suite for speculative decoding servers."""

__version__ = "0.1.0"
