"""What retrieval drafting reads, not a method itself: REST's datastore (`datastore.py`), built by
`specbench datastore build` and searched by `methods/rest.py`, and SuffixDecoding's suffix trees
(`suffix_tree.py`), grown and searched by `methods/suffix.py`, with the reference's per-request
cache over them (`suffix_cache.py`)."""
