"""The capstone's data: a public-domain corpus shipped with the package, a byte tokenizer,
a dataset of fixed-length windows, a deliberately slow variant, and the DataLoader settings.

The corpus is *The Devil's Dictionary* by Ambrose Bierce (1911, public domain); its source,
licence and the exact changes made are in ``helpers/data/capstone_corpus_README.md``.
Nothing is downloaded when a notebook runs.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import time
import warnings
from collections.abc import Iterator
from importlib import resources
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from .._validate import count
from .._validate import flag as _flag

CORPUS_FILE = "capstone_corpus.txt.gz"
CORPUS_README = "capstone_corpus_README.md"
CORPUS_TITLE = "The Devil's Dictionary, Ambrose Bierce (1911), public domain"


@functools.lru_cache(maxsize=1)
def corpus_bytes() -> bytes:
    """The corpus text as bytes (plain ASCII), read from the package data."""
    path = resources.files("helpers") / "data" / CORPUS_FILE
    with path.open("rb") as fh:
        return gzip.decompress(fh.read())


def corpus_text() -> str:
    """The corpus as a string."""
    return corpus_bytes().decode("ascii")


def corpus_sha256() -> str:
    """SHA-256 of the uncompressed corpus (the README states the expected value)."""
    return hashlib.sha256(corpus_bytes()).hexdigest()


class ByteTokenizer:
    """Byte-level tokenizer: token id = byte value (vocabulary 256), lossless for any text."""

    vocab_size = 256

    def encode(self, text: str | bytes) -> torch.Tensor:
        """``text`` (UTF-8 for a str) -> int64 tensor of byte values."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(torch.int64)

    def decode(self, ids: torch.Tensor | list[int]) -> str:
        """Token ids -> text (bytes that are not valid UTF-8 are replaced, never dropped)."""
        values = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        if any(not 0 <= v < 256 for v in values):
            raise ValueError("byte token ids must be in 0..255")
        return bytes(values).decode("utf-8", errors="replace")


@functools.lru_cache(maxsize=1)
def corpus_tokens() -> torch.Tensor:
    """The whole corpus as byte tokens (int64), computed once per process."""
    return ByteTokenizer().encode(corpus_bytes())


class TokenWindows(Dataset):
    """Windows of ``seq_len + 1`` tokens starting every ``stride`` tokens.

    Item ``i`` is ``(input, target)``: tokens ``[i·stride, i·stride + seq_len)`` and the same
    shifted by one (next-token prediction). Items are cheap slices: this dataset never stalls.
    """

    def __init__(self, tokens: torch.Tensor, seq_len: int, stride: int | None = None) -> None:
        stride = seq_len if stride is None else stride
        seq_len, stride = count(seq_len=seq_len, stride=stride)
        if tokens.dim() != 1 or tokens.numel() < seq_len + 1:
            raise ValueError(
                f"need a 1-D token tensor of at least seq_len + 1 = {seq_len + 1} tokens, "
                f"got shape {tuple(tokens.shape)}"
            )
        self.tokens, self.seq_len, self.stride = tokens, seq_len, stride

    def __len__(self) -> int:
        return (self.tokens.numel() - self.seq_len - 1) // self.stride + 1

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} out of range 0..{len(self) - 1}")
        start = i * self.stride
        chunk = self.tokens[start : start + self.seq_len + 1]
        return chunk[:-1], chunk[1:]


class SlowDataset(Dataset):
    """A dataset that makes every item cost ``delay_ms`` of waiting, as a slow disk, a remote
    store or heavy CPU pre-processing would. The wait is a sleep: it blocks the process that
    reads the item, but uses no CPU, so DataLoader workers can hide it by reading ahead."""

    def __init__(self, base: Dataset, delay_ms: float, sleep=time.sleep) -> None:
        if not delay_ms >= 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms!r}")
        self.base, self.delay_ms, self._sleep = base, float(delay_ms), sleep

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]  # a map-style dataset: torch's Dataset has no __len__

    def __getitem__(self, i: int):
        if self.delay_ms:
            self._sleep(self.delay_ms / 1e3)
        return self.base[i]


def make_dataset(seq_len: int, delay_ms_per_sample: float = 0.0) -> Dataset:
    """Windows of the shipped corpus, each ``delay_ms_per_sample`` slow (0: a fast dataset)."""
    windows = TokenWindows(corpus_tokens(), seq_len, stride=max(1, seq_len // 2))
    return SlowDataset(windows, delay_ms_per_sample) if delay_ms_per_sample else windows


def make_loader(
    dataset: Dataset,
    batch_size: int,
    num_samples: int,
    *,
    workers: int = 0,
    pin_memory: bool = False,
    seed: int = 0,
    prefetch_factor: int = 2,
) -> DataLoader:
    """A DataLoader drawing ``num_samples`` windows in a seeded random order.

    The order depends only on ``seed``, never on ``workers``, so configurations that differ
    only in loading see the same batches in the same order (and reach the same loss).
    ``workers > 0`` reads ahead in that many processes (``persistent_workers``, and
    ``prefetch_factor`` batches each); ``pin_memory`` puts batches in page-locked host memory
    so the copy to a GPU can run asynchronously (it only helps with a GPU).
    """
    _flag(pin_memory=pin_memory)
    batch_size, num_samples = count(batch_size=batch_size, num_samples=num_samples)
    (workers,) = count(0, workers=workers)
    sampler = RandomSampler(
        dataset,  # type: ignore[arg-type]  # (a map-style dataset: Sized)
        replacement=True,
        num_samples=num_samples,
        generator=torch.Generator().manual_seed(seed),
    )
    extra: dict[str, Any] = (
        {"persistent_workers": True, "prefetch_factor": prefetch_factor} if workers else {}
    )
    with _no_worker_advice():
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            num_workers=workers,
            pin_memory=pin_memory,
            drop_last=True,
            **extra,
        )


@contextlib.contextmanager
def _no_worker_advice() -> Iterator[None]:
    # DataLoader advises no more workers than CPU cores; the slow dataset's workers wait
    # rather than compute, so more of them than cores helps here.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        yield


def batches(loader: DataLoader) -> Iterator:
    """``iter(loader)`` (see :func:`_no_worker_advice`)."""
    with _no_worker_advice():
        return iter(loader)
