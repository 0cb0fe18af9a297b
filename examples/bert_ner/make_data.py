"""How ``data/train.conll`` and ``data/dev.conll`` were made: ``python make_data.py`` here.

Sentences in the words of the tiny BERT (``python -m jobs.bert.tiny``) with three entity types,
tagged BIO as CoNLL-2003's English data is laid out (one token per line, its tag last, a blank
line between sentences): ``ANIMAL`` (an animal, maybe after an adjective, maybe plural: "big
dogs" is two words, ``dogs`` two word pieces), ``FOOD`` and ``PLACE``; two entities of one type
side by side start with ``B-`` each. Deterministic (seeded).
"""

import random
from pathlib import Path

ANIMALS = ["cat", "dog", "bird", "fish", "horse", "mouse", "cow", "fox"]
FOODS = ["bread", "apple", "cheese", "soup", "rice", "cake", "tea", "milk"]
PLACES = ["street", "shop", "park", "road", "bridge"]
ADJECTIVES = ["big", "small", "old", "new", "red", "blue", "green", "quiet"]
VERBS = ["see", "like", "find", "want", "watch", "hear", "love", "need"]
SUBJECTS = ["we", "they", "i", "you"]


def entity(kind: str, rng: random.Random) -> list[tuple[str, str]]:
    if kind == "ANIMAL":
        words = ([rng.choice(ADJECTIVES)] if rng.random() < 0.5 else []) + \
            [rng.choice(ANIMALS) + ("s" if rng.random() < 0.3 else "")]
    else:
        words = [rng.choice(FOODS if kind == "FOOD" else PLACES)]
    return [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(words)]


def sentence(rng: random.Random) -> list[tuple[str, str]]:
    out = [(rng.choice(SUBJECTS), "O"), (rng.choice(VERBS), "O"), ("the", "O")]
    out += entity(rng.choice(["ANIMAL", "FOOD"]), rng)
    roll = rng.random()
    if roll < 0.3:
        out += [("and", "O"), ("the", "O"), *entity(rng.choice(["ANIMAL", "FOOD"]), rng)]
    elif roll < 0.4:  # two animals side by side: B- B-
        out += entity("ANIMAL", rng)
    if rng.random() < 0.6:
        out += [(rng.choice(["in", "on"]), "O"), ("the", "O"), *entity("PLACE", rng)]
    return [*out, (".", "O")]


def write(path: Path, count: int, seed: int) -> None:
    rng = random.Random(seed)
    lines = ["-DOCSTART- O", ""]
    for _ in range(count):
        lines += [f"{word} {tag}" for word, tag in sentence(rng)] + [""]
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    here = Path(__file__).resolve().parent / "data"
    write(here / "train.conll", 400, seed=1)
    write(here / "dev.conll", 80, seed=2)
