"""Cut lists into chunks and put them back together."""

from chunks.batching import chunked, flatten

__all__ = ["chunked", "flatten"]
