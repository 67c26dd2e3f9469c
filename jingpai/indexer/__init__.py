"""Corpus readers, dictionary-augmented documents and bulk indexing into indices jingpai owns."""
