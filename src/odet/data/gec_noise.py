"""Synthetic grammatical errors: corrupt clean English into learner-like text for GEC training.

JFLEG and CoNLL-14 have no free training split; the usual remedy is to pre-train on clean text
with artificial errors (Grundkiewicz et al. 2019; Kiyono et al. 2019). `GECNoise` corrupts a
tokenized sentence (tokens separated by spaces, punctuation split off, as in Moses/PTB output)
with the error types most frequent in learner corpora:

=========== ==================================================================================
type        what happens to an eligible token
=========== ==================================================================================
confusion   a commonly confused word: their/there, then/than, its/"it 's", to/too, lose/loose ...
article     a/an/the replaced by another article, or deleted
preposition a preposition replaced by another one
agreement   subject–verb agreement broken: is/are, was/were, has/have, goes/go ...
verb_form   a verb replaced by another form of the same verb: go/goes/went/gone/going
noun_number a noun's number flipped: book/books, child/children
typo        one character deleted, doubled, transposed or replaced by a keyboard neighbour
deletion    the token is dropped
insertion   a frequent function word is inserted after the token
swap        the token swaps places with the next one
=========== ==================================================================================

Each probability in `NoiseConfig` is **per eligible token**. Word-level types are tried on each
token in the order above and at most one of them changes a token; then deletions, insertions and
swaps are applied to the result. Only small built-in word lists are used (no downloads), so
coverage is that of the lists; capitalisation of a replaced word is kept. Everything is driven by
one ``random.Random(seed)``: the same seed and the same calls give the same output.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Literal, get_args

__all__ = ["AppliedError", "Corruption", "ErrorType", "GECNoise", "NoiseConfig", "error_types_for"]

ErrorType = Literal[
    "confusion",
    "article",
    "preposition",
    "agreement",
    "verb_form",
    "noun_number",
    "typo",
    "deletion",
    "insertion",
    "swap",
]
WORD_TYPES: tuple[ErrorType, ...] = (
    "confusion",
    "article",
    "preposition",
    "agreement",
    "verb_form",
    "noun_number",
    "typo",
)

_ARTICLES = ("a", "an", "the")
_PREPOSITIONS = ("in", "on", "at", "to", "for", "of", "with", "from", "by", "about", "into")

# Replacements that are multi-token follow PTB/Moses tokenization ("it's" -> "it 's").
_CONFUSIONS: dict[str, tuple[str, ...]] = {
    "their": ("there", "they 're"),
    "there": ("their", "they 're"),
    "its": ("it 's",),
    "your": ("you 're",),
    "whose": ("who 's",),
    "then": ("than",),
    "than": ("then",),
    "too": ("to",),
    "affect": ("effect",),
    "effect": ("affect",),
    "lose": ("loose",),
    "loose": ("lose",),
    "accept": ("except",),
    "except": ("accept",),
    "where": ("were",),
    "quite": ("quiet",),
    "quiet": ("quite",),
    "whether": ("weather",),
    "weather": ("whether",),
    "advice": ("advise",),
    "advise": ("advice",),
    "lend": ("borrow",),
    "borrow": ("lend",),
    "make": ("do",),
    "say": ("tell",),
    "tell": ("say",),
}

_AGREEMENT: dict[str, str] = {
    "is": "are",
    "are": "is",
    "was": "were",
    "were": "was",
    "has": "have",
    "have": "has",
    "does": "do",
    "do": "does",
}

# base, 3rd person singular, past, past participle, -ing
_VERBS: tuple[tuple[str, str, str, str, str], ...] = (
    ("go", "goes", "went", "gone", "going"),
    ("make", "makes", "made", "made", "making"),
    ("take", "takes", "took", "taken", "taking"),
    ("come", "comes", "came", "come", "coming"),
    ("see", "sees", "saw", "seen", "seeing"),
    ("get", "gets", "got", "gotten", "getting"),
    ("give", "gives", "gave", "given", "giving"),
    ("know", "knows", "knew", "known", "knowing"),
    ("think", "thinks", "thought", "thought", "thinking"),
    ("write", "writes", "wrote", "written", "writing"),
    ("eat", "eats", "ate", "eaten", "eating"),
    ("buy", "buys", "bought", "bought", "buying"),
    ("run", "runs", "ran", "run", "running"),
    ("sit", "sits", "sat", "sat", "sitting"),
    ("stand", "stands", "stood", "stood", "standing"),
    ("play", "plays", "played", "played", "playing"),
    ("walk", "walks", "walked", "walked", "walking"),
    ("work", "works", "worked", "worked", "working"),
    ("look", "looks", "looked", "looked", "looking"),
    ("want", "wants", "wanted", "wanted", "wanting"),
    ("live", "lives", "lived", "lived", "living"),
    ("study", "studies", "studied", "studied", "studying"),
    ("ride", "rides", "rode", "ridden", "riding"),
    ("wear", "wears", "wore", "worn", "wearing"),
    ("hold", "holds", "held", "held", "holding"),
    ("read", "reads", "read", "read", "reading"),
    ("swim", "swims", "swam", "swum", "swimming"),
    ("climb", "climbs", "climbed", "climbed", "climbing"),
    ("talk", "talks", "talked", "talked", "talking"),
    ("jump", "jumps", "jumped", "jumped", "jumping"),
)
_VERB_FORMS: dict[str, tuple[str, ...]] = {}
for _forms in _VERBS:
    for _form in _forms:
        _VERB_FORMS[_form] = tuple(dict.fromkeys(f for f in _forms if f != _form))
# Base form <-> 3rd person singular is the agreement error of lexical verbs.
for _forms in _VERBS:
    _AGREEMENT.setdefault(_forms[0], _forms[1])
    _AGREEMENT.setdefault(_forms[1], _forms[0])

_NOUNS: tuple[tuple[str, str], ...] = (
    ("man", "men"),
    ("woman", "women"),
    ("child", "children"),
    ("person", "people"),
    ("foot", "feet"),
    ("tooth", "teeth"),
    ("book", "books"),
    ("dog", "dogs"),
    ("car", "cars"),
    ("friend", "friends"),
    ("student", "students"),
    ("teacher", "teachers"),
    ("school", "schools"),
    ("problem", "problems"),
    ("idea", "ideas"),
    ("country", "countries"),
    ("city", "cities"),
    ("family", "families"),
    ("house", "houses"),
    ("boy", "boys"),
    ("girl", "girls"),
    ("shirt", "shirts"),
    ("street", "streets"),
    ("ball", "balls"),
    ("tree", "trees"),
    ("day", "days"),
    ("year", "years"),
    ("thing", "things"),
    ("job", "jobs"),
    ("information", "informations"),
    ("advice", "advices"),
    ("knowledge", "knowledges"),
)
_NOUN_NUMBER: dict[str, str] = {}
for _singular, _plural in _NOUNS:
    _NOUN_NUMBER.setdefault(_singular, _plural)
    _NOUN_NUMBER.setdefault(_plural, _singular)

_INSERTABLE = ("the", "a", "to", "of", "is", "that", "very", "in", "for", "it")
_KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_NEIGHBOURS: dict[str, str] = {}
for _row_index, _row in enumerate(_KEYBOARD_ROWS):
    for _col, _char in enumerate(_row):
        near = {_row[c] for c in (_col - 1, _col + 1) if 0 <= c < len(_row)}
        for _other_index in (_row_index - 1, _row_index + 1):
            if 0 <= _other_index < len(_KEYBOARD_ROWS):
                other = _KEYBOARD_ROWS[_other_index]
                near |= {other[c] for c in (_col - 1, _col, _col + 1) if 0 <= c < len(other)}
        _NEIGHBOURS[_char] = "".join(sorted(near))


@dataclass(frozen=True)
class NoiseConfig:
    """Per-eligible-token probability of each error type (see the module table)."""

    confusion: float = 0.3
    article: float = 0.15
    preposition: float = 0.1
    agreement: float = 0.1
    verb_form: float = 0.05
    noun_number: float = 0.05
    typo: float = 0.02
    deletion: float = 0.01
    insertion: float = 0.01
    swap: float = 0.01

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"NoiseConfig.{name} must be a probability in [0, 1], got {value!r}"
                )

    @classmethod
    def only(cls, error_type: ErrorType, probability: float) -> NoiseConfig:
        """A config in which only ``error_type`` fires, with ``probability``."""
        if error_type not in get_args(ErrorType):
            raise ValueError(
                f"unknown error type {error_type!r}; choose from {get_args(ErrorType)}"
            )
        zeros = dict.fromkeys(get_args(ErrorType), 0.0)
        return cls(**{**zeros, error_type: probability})


@dataclass(frozen=True)
class AppliedError:
    """One applied error: its type, the index of the original token, and the change."""

    type: ErrorType
    position: int
    original: str
    replacement: str


@dataclass(frozen=True)
class Corruption:
    """A corrupted sentence and the errors applied to it, left to right."""

    text: str
    errors: tuple[AppliedError, ...]

    @property
    def types(self) -> tuple[ErrorType, ...]:
        return tuple(e.type for e in self.errors)


def _is_typo_candidate(token: str) -> bool:
    return len(token) >= 3 and token.isalpha()


def error_types_for(token: str) -> tuple[ErrorType, ...]:
    """Word-level error types that can change ``token`` (every token admits deletion etc.)."""
    low = token.lower()
    table: dict[ErrorType, bool] = {
        "confusion": low in _CONFUSIONS,
        "article": low in _ARTICLES,
        "preposition": low in _PREPOSITIONS,
        "agreement": low in _AGREEMENT,
        "verb_form": low in _VERB_FORMS,
        "noun_number": low in _NOUN_NUMBER,
        "typo": _is_typo_candidate(token),
    }
    return tuple(t for t in WORD_TYPES if table[t])


def _match_case(original: str, replacement: str) -> str:
    if not replacement:
        return replacement
    if len(original) > 1 and original.isupper():
        return replacement.upper()
    if original[0].isupper():
        return replacement[0].upper() + replacement[1:]
    return replacement


def _typo(token: str, rng: random.Random) -> str:
    """One character-level edit that changes ``token`` (deletion, doubling, swap, neighbour)."""
    while True:
        i = rng.randrange(len(token))
        op = rng.randrange(4)
        if op == 0:
            out = token[:i] + token[i + 1 :]
        elif op == 1:
            out = token[: i + 1] + token[i:]
        elif op == 2 and i + 1 < len(token):
            out = token[:i] + token[i + 1] + token[i] + token[i + 2 :]
        elif op == 3 and token[i].lower() in _NEIGHBOURS:
            out = token[:i] + rng.choice(_NEIGHBOURS[token[i].lower()]) + token[i + 1 :]
        else:
            continue
        if out != token:
            return out


class GECNoise:
    """Seeded corruptor of tokenized English sentences (see the module docstring)."""

    def __init__(self, config: NoiseConfig | None = None, *, seed: int = 0) -> None:
        self.config = config if config is not None else NoiseConfig()
        self._probability: dict[str, float] = asdict(self.config)
        self._rng = random.Random(seed)

    def __call__(self, sentence: str) -> str:
        """The corrupted sentence."""
        return self.corrupt(sentence).text

    def _word_error(self, token: str) -> tuple[ErrorType, str] | None:
        rng = self._rng
        low = token.lower()
        for kind in error_types_for(token):
            if rng.random() >= self._probability[kind]:
                continue
            if kind == "confusion":
                new = rng.choice(_CONFUSIONS[low])
            elif kind == "article":
                others = [a for a in _ARTICLES if a != low]
                new = rng.choice([*others, ""])  # one third of article errors are omissions
            elif kind == "preposition":
                new = rng.choice([p for p in _PREPOSITIONS if p != low])
            elif kind == "agreement":
                new = _AGREEMENT[low]
            elif kind == "verb_form":
                new = rng.choice(_VERB_FORMS[low])
            elif kind == "noun_number":
                new = _NOUN_NUMBER[low]
            else:
                return kind, _typo(token, rng)
            return kind, _match_case(token, new)
        return None

    def corrupt(self, sentence: str) -> Corruption:
        """Corrupt one sentence; returns the text and the applied errors."""
        rng, cfg = self._rng, self.config
        tokens = sentence.split()
        errors: list[AppliedError] = []
        # (original index, token or phrase) after word-level errors; "" marks a deleted article.
        words: list[tuple[int, str]] = []
        for i, token in enumerate(tokens):
            hit = self._word_error(token)
            if hit is None:
                words.append((i, token))
                continue
            kind, new = hit
            errors.append(AppliedError(kind, i, token, new))
            if new:
                words.append((i, new))
        out: list[tuple[int, str]] = []
        for k, (i, word) in enumerate(words):
            remaining = len(out) + len(words) - k  # never delete the last word standing
            if remaining > 1 and rng.random() < cfg.deletion:
                errors.append(AppliedError("deletion", i, word, ""))
                continue
            out.append((i, word))
            if rng.random() < cfg.insertion:
                extra = rng.choice(_INSERTABLE)
                errors.append(AppliedError("insertion", i, "", extra))
                out.append((i, extra))
        k = 0
        while k + 1 < len(out):
            if out[k][1] != out[k + 1][1] and rng.random() < cfg.swap:
                errors.append(AppliedError("swap", out[k][0], out[k][1], out[k + 1][1]))
                out[k], out[k + 1] = out[k + 1], out[k]
                k += 2
            else:
                k += 1
        errors.sort(key=lambda e: e.position)
        return Corruption(" ".join(w for _, w in out), tuple(errors))
