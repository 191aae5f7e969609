"""Model definitions, loaders (GGUF, Hugging Face directory) and the tokenizer."""
