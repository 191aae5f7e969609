"""Speech recognition through edgespec's pipeline: audio input, CTC decoding, streaming,
words from phonemes, the ASR validation suite and export (the Conformer of
`edgespec.models.conformer`)."""
