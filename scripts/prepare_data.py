#!/usr/bin/env python
"""Build the embedded default corpus: this Python's stdlib as a datasets DatasetDict plus a BPE tokenizer.

    python scripts/prepare_data.py                       # data/stdlib, vocab 8192, all ~30 MB
    python scripts/prepare_data.py --out /tmp/c --vocab-size 512 --max-corpus-mb 2

`flamia-train data=stdlib` runs the same function (flamia_train.data.prepare_default_corpus)
when the files are missing; this script exists to do it ahead of time or with other sizes.
An existing directory is reused if it is a complete corpus and otherwise left untouched.
"""

from __future__ import annotations

import argparse
import sys
import time

from flamia_train.data import prepare_default_corpus
from flamia_train.errors import FlamiaError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="data/stdlib", help="output directory (default: data/stdlib)")
    parser.add_argument("--vocab-size", type=int, default=8192, help="BPE vocabulary size (default: 8192)")
    parser.add_argument("--max-corpus-mb", type=float, default=0.0, help="cap in MB of UTF-8 text (0 = all)")
    parser.add_argument("--heldout-fraction", type=float, default=0.01, help="fraction of modules held out")
    parser.add_argument("--seed", type=int, default=1234, help="seeds sampling, split and tokenizer training")
    args = parser.parse_args(argv)
    start = time.time()
    try:
        paths = prepare_default_corpus(
            args.out, args.vocab_size, args.max_corpus_mb, args.seed, args.heldout_fraction
        )
    except FlamiaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"dataset:   {paths.dataset_dir}")
    print(f"tokenizer: {paths.tokenizer}")
    print(f"done in {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
