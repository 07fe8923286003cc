"""Retrieval: loading documents, chunking them, embedding them, and searching them."""
