"""ehrbench: an evaluation harness for LLM agents over electronic health records."""
__version__ = "0.1.0"
