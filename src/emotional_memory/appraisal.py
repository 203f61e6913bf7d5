"""Cognitive appraisal (Scherer's component process model) mapped onto core affect.

An :class:`AppraisalVector` scores an event on five stimulus-evaluation checks;
:meth:`AppraisalVector.to_core_affect` projects it to valence/arousal/dominance with
fixed linear coefficients (docs/behaviour.md §8).

Three engines produce vectors from text; all satisfy the ``AppraisalEngine`` protocol
of :mod:`emotional_memory.interfaces` structurally (nothing here imports that module,
which itself imports this one):

* :class:`StaticAppraisalEngine` -- always the same vector (tests, fixed contexts).
* :class:`KeywordAppraisalEngine` -- whole-word keyword/phrase rules, averaged.
* :class:`LLMAppraisalEngine` -- asks a ``(prompt, json_schema) -> str`` callable,
  parses its JSON answer robustly, caches results and falls back on error (defined
  in :mod:`emotional_memory.appraisal_llm`, importable from here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from emotional_memory._llm import (
    LLMCallable,
)
from emotional_memory._validation import finite
from emotional_memory.affect import CoreAffect
from emotional_memory.appraisal_schema import (
    DIRECT_VAD_SCHEMA,
    SCHERER_CPM_SCHEMA,
    AppraisalDimension,
    AppraisalSchema,
    GenericAppraisalVector,
    coerce_appraisal_dimensions,
    scherer_core_affect,
)

__all__ = [
    "APPRAISAL_DIMENSIONS",
    "DEFAULT_KEYWORD_RULES",
    "DIRECT_VAD_SCHEMA",
    "SCHERER_CPM_SCHEMA",
    "AppraisalDimension",
    "AppraisalSchema",
    "AppraisalVector",
    "GenericAppraisalVector",
    "KeywordAppraisalEngine",
    "KeywordRule",
    "LLMCallable",
    "StaticAppraisalEngine",
    "coerce_appraisal_dimensions",
]

# Names the original defines in this module but that live elsewhere here; resolved
# lazily because ``interfaces`` and ``models`` import this module.
_LAZY: dict[str, str] = {
    "AppraisalEngine": "emotional_memory.interfaces",
    "consolidation_strength": "emotional_memory.models",
    # the LLM engine lives in appraisal_llm (which imports this module)
    "DEFAULT_LLM_SYSTEM_PROMPT": "emotional_memory.appraisal_llm",
    "LLMAppraisalConfig": "emotional_memory.appraisal_llm",
    "LLMAppraisalEngine": "emotional_memory.appraisal_llm",
}
__all__ = sorted(set(__all__) | set(_LAZY))


def __getattr__(name: str) -> Any:
    """Resolve the original's names that are defined in other modules (PEP 562).

    Args:
        name: Attribute name.

    Returns:
        The object.

    Raises:
        AttributeError: For unknown names.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class AppraisalVector(BaseModel):
    """Five appraisal dimensions of an event (Scherer's stimulus evaluation checks).

    Attributes:
        novelty: [-1, 1] expected..surprising.
        goal_relevance: [-1, 1] obstructive..conducive.
        coping_potential: [0, 1] helpless..in control.
        norm_congruence: [-1, 1] violates..fits norms and values.
        self_relevance: [0, 1] how much it concerns oneself.

    All five are required (as in the original library); finite values outside their
    range are clamped into it; NaN, infinities and non-numbers raise ``ValueError``
    naming the field. :meth:`neutral` is the "no information" appraisal.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    novelty: float
    goal_relevance: float
    coping_potential: float
    norm_congruence: float
    self_relevance: float

    @field_validator("novelty", "goal_relevance", "norm_congruence", mode="before")
    @classmethod
    def _signed(cls, v: float, info: object) -> float:
        name = str(getattr(info, "field_name", "value"))
        return min(1.0, max(-1.0, finite(name, v)))

    @field_validator("coping_potential", "self_relevance", mode="before")
    @classmethod
    def _unit(cls, v: float, info: object) -> float:
        name = str(getattr(info, "field_name", "value"))
        return min(1.0, max(0.0, finite(name, v)))

    @classmethod
    def neutral(cls) -> AppraisalVector:
        """The neutral appraisal: novelty 0, goal 0, coping 0.5, norm 0, self 0.

        Returns:
            The neutral vector.
        """
        return cls(
            novelty=0.0,
            goal_relevance=0.0,
            coping_potential=0.5,
            norm_congruence=0.0,
            self_relevance=0.0,
        )

    @property
    def schema_name(self) -> str:
        """``"scherer_cpm"``: the schema these five dimensions belong to."""
        return SCHERER_CPM_SCHEMA.name

    def to_core_affect(self) -> CoreAffect:
        """Project onto PAD space (coefficients of docs/behaviour.md §8; CoreAffect clamps).

        Returns:
            The ``CoreAffect``; identical to projecting the same five values through
            :data:`SCHERER_CPM_SCHEMA`.
        """
        return scherer_core_affect(self.model_dump())


# --------------------------------------------------------------------------- shared helpers

#: What ``KeywordAppraisalEngine()`` answers when no rule fires: the neutral
#: appraisal, as in the original.
_KEYWORD_DEFAULT = AppraisalVector.neutral()

#: The five appraisal dimensions with their (low, high) ranges, in canonical order.
APPRAISAL_DIMENSIONS: dict[str, tuple[float, float]] = {
    "novelty": (-1.0, 1.0),
    "goal_relevance": (-1.0, 1.0),
    "coping_potential": (0.0, 1.0),
    "norm_congruence": (-1.0, 1.0),
    "self_relevance": (0.0, 1.0),
}


def _check_content(content: object, field: str = "event_text") -> str:
    """Return ``content`` if it is a ``str``, else raise ``TypeError`` naming ``field``."""
    if not isinstance(content, str):
        raise TypeError(f"{field} must be a str, got {type(content).__name__}")
    return content


def _check_context(context: object) -> Mapping[str, Any] | None:
    """Return ``context`` if it is ``None`` or a mapping, else raise ``TypeError``."""
    if context is not None and not isinstance(context, Mapping):
        raise TypeError(f"context must be a dict or None, got {type(context).__name__}")
    return context


def _clamp_to_range(values: Mapping[str, float]) -> AppraisalVector:
    """Build an :class:`AppraisalVector`, clamping each given dimension into its range."""
    clamped = {
        name: min(APPRAISAL_DIMENSIONS[name][1], max(APPRAISAL_DIMENSIONS[name][0], value))
        for name, value in values.items()
    }
    return AppraisalVector(**clamped)


# --------------------------------------------------------------------------- static


class StaticAppraisalEngine:
    """Appraisal engine that returns the same vector for every event.

    Useful in tests and when an application wants a fixed affective colouring.
    """

    def __init__(self, vector: AppraisalVector | None = None) -> None:
        """Create the engine.

        Args:
            vector: The appraisal returned by every call to :meth:`appraise`;
                ``None`` (the default) means :meth:`AppraisalVector.neutral`.

        Raises:
            TypeError: If ``vector`` is not an :class:`AppraisalVector`.
        """
        if vector is None:
            vector = AppraisalVector.neutral()
        if not isinstance(vector, AppraisalVector):
            raise TypeError(f"vector must be an AppraisalVector, got {type(vector).__name__}")
        self._vector = vector

    @property
    def vector(self) -> AppraisalVector:
        """The fixed appraisal this engine returns."""
        return self._vector

    def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector:
        """Return the fixed vector (``event_text`` and ``context`` are only type-checked).

        Args:
            event_text: The event description.
            context: Optional extra information (ignored).

        Returns:
            The vector given at construction.

        Raises:
            TypeError: If ``event_text`` is not a ``str`` or ``context`` is not a dict.
        """
        _check_content(event_text)
        _check_context(context)
        return self._vector

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vector={self._vector!r})"


# --------------------------------------------------------------------------- keywords


class KeywordRule(BaseModel):
    """One keyword rule, in either of two forms.

    **The original's form** -- ``KeywordRule(pattern, novelty=0.0, goal_relevance=0.0,
    coping_potential=0.0, norm_congruence=0.0, self_relevance=0.0)``: a regular
    expression (searched case-insensitively) and score *deltas* from the neutral
    appraisal. An engine of such rules averages, per dimension, the non-zero deltas
    of the rules that match, adds the 0.5 coping baseline, and clamps.

    **Phrase form** (this library's) -- ``KeywordRule(keywords=[...],
    appraisal={...}, weight=1.0, name="")``: whole-word phrases voting for absolute
    values, averaged by weight and hit count (see :class:`KeywordAppraisalEngine`).

    Attributes:
        keywords: Non-empty list of words or short phrases, matched as whole words,
            case-insensitively; inner whitespace in a phrase matches any whitespace.
            Stored lower-cased with whitespace collapsed.
        appraisal: Partial appraisal the rule votes for -- a mapping from dimension
            name (see :data:`APPRAISAL_DIMENSIONS`) to a value inside that dimension's
            range. An :class:`AppraisalVector` is accepted and expands to all five.
            Dimensions a rule leaves out are not voted on by it.
        weight: Positive, finite strength of the rule's vote (default 1.0).
        name: Optional label, used in explanations and ``repr``.
        pattern: The regular expression of an original-form rule (else None).
        scores: The five deltas of an original-form rule (else empty).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    keywords: list[str] = Field(default_factory=list)
    appraisal: dict[str, float] = Field(default_factory=dict)
    weight: float = 1.0
    name: str = ""
    pattern: str | None = None
    scores: dict[str, float] = Field(default_factory=dict)

    def __init__(
        self,
        pattern: str | None = None,
        novelty: float = 0.0,
        goal_relevance: float = 0.0,
        coping_potential: float = 0.0,
        norm_congruence: float = 0.0,
        self_relevance: float = 0.0,
        **data: Any,
    ) -> None:
        """Create a rule in the original's form (``pattern`` + deltas) or phrase form.

        Args:
            pattern: Regular expression of an original-form rule.
            novelty, goal_relevance, coping_potential, norm_congruence,
                self_relevance: Finite score deltas of an original-form rule.
            **data: The phrase-form fields (``keywords``, ``appraisal``, ``weight``,
                ``name``), or ``pattern``/``scores`` as stored.

        Raises:
            ValueError: Both forms mixed, neither given, a bad regex or a
                non-finite delta (naming the field).
        """
        if pattern is not None:
            if data.get("keywords") or data.get("appraisal"):
                raise ValueError("give either pattern (+ deltas) or keywords/appraisal, not both")
            deltas = {
                "novelty": novelty,
                "goal_relevance": goal_relevance,
                "coping_potential": coping_potential,
                "norm_congruence": norm_congruence,
                "self_relevance": self_relevance,
            }
            data = {**data, "pattern": pattern, "scores": deltas}
        super().__init__(**data)

    @field_validator("pattern", mode="before")
    @classmethod
    def _check_pattern(cls, v: object) -> str | None:
        if v is None:
            return None
        if not isinstance(v, str):
            raise TypeError(f"pattern must be a str, got {type(v).__name__}")
        try:
            re.compile(v, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"pattern is not a valid regular expression: {exc}") from exc
        return v

    @field_validator("scores", mode="before")
    @classmethod
    def _check_scores(cls, v: object) -> dict[str, float]:
        if not isinstance(v, Mapping):
            raise TypeError(f"scores must be a dict, got {type(v).__name__}")
        unknown = [k for k in v if k not in APPRAISAL_DIMENSIONS]
        if unknown:
            raise ValueError(f"scores has unknown dimension(s) {unknown}")
        return {k: finite(k, v.get(k, 0.0)) for k in APPRAISAL_DIMENSIONS}

    @model_validator(mode="after")
    def _one_form(self) -> KeywordRule:
        if self.pattern is None and not (self.keywords and self.appraisal):
            raise ValueError("a KeywordRule needs a pattern, or keywords and an appraisal")
        if self.pattern is not None and (self.keywords or self.appraisal):
            raise ValueError("give either pattern (+ deltas) or keywords/appraisal, not both")
        return self

    @property
    def is_pattern_rule(self) -> bool:
        """Whether this rule is in the original's (pattern + deltas) form."""
        return self.pattern is not None

    def matches(self, text: str) -> bool:
        """Whether the rule fires on ``text``.

        Args:
            text: The event description.

        Returns:
            True when the pattern (original form) or any phrase (phrase form) occurs.
        """
        return _compile_rule(self).search(_check_content(text, "text")) is not None

    def __repr__(self) -> str:
        if self.pattern is not None:
            return f"KeywordRule(pattern={self.pattern!r})"
        return super().__repr__()

    @field_validator("keywords", mode="before")
    @classmethod
    def _normalise_keywords(cls, v: object) -> list[str]:
        if isinstance(v, str) or not isinstance(v, Sequence):
            raise TypeError(f"keywords must be a list of str, got {type(v).__name__}")
        out: list[str] = []
        for i, kw in enumerate(v):
            if not isinstance(kw, str):
                raise TypeError(f"keywords[{i}] must be a str, got {type(kw).__name__}")
            norm = " ".join(kw.lower().split())
            if not norm:
                raise ValueError(f"keywords[{i}] must not be empty")
            if norm not in out:
                out.append(norm)
        if not out:
            raise ValueError("keywords must not be empty")
        return out

    @field_validator("appraisal", mode="before")
    @classmethod
    def _check_appraisal(cls, v: object) -> dict[str, float]:
        if isinstance(v, AppraisalVector):
            return v.model_dump()
        if not isinstance(v, Mapping):
            raise TypeError(f"appraisal must be a dict or AppraisalVector, got {type(v).__name__}")
        if not v:
            raise ValueError("appraisal must name at least one dimension")
        out: dict[str, float] = {}
        for key, value in v.items():
            if key not in APPRAISAL_DIMENSIONS:
                raise ValueError(
                    f"appraisal has unknown dimension {key!r}; "
                    f"expected one of {list(APPRAISAL_DIMENSIONS)}"
                )
            low, high = APPRAISAL_DIMENSIONS[key]
            num = finite(f"appraisal[{key!r}]", value)
            if not low <= num <= high:
                raise ValueError(f"appraisal[{key!r}] must lie in [{low}, {high}], got {num}")
            out[key] = num
        return out

    @field_validator("weight", mode="before")
    @classmethod
    def _check_weight(cls, v: float) -> float:
        w = finite("weight", v)
        if w <= 0:
            raise ValueError(f"weight must be > 0, got {w}")
        return w

    @field_validator("name", mode="before")
    @classmethod
    def _check_name(cls, v: object) -> str:
        if not isinstance(v, str):
            raise TypeError(f"name must be a str, got {type(v).__name__}")
        return v


def _rule(name: str, keywords: str, **appraisal: float) -> KeywordRule:
    """Build a default rule from a comma-separated keyword string."""
    return KeywordRule(name=name, keywords=keywords.split(","), appraisal=appraisal)


#: Built-in rule set used by ``KeywordAppraisalEngine()`` (one rule per broad theme).
DEFAULT_KEYWORD_RULES: tuple[KeywordRule, ...] = (
    _rule(
        "loss",
        (
            "died,dies,dying,death,dead,funeral,passed away,grief,grieve,grieving,mourn,"
            "mourning,bereaved,bereavement,lost,loss,miss them,gone forever,heartbroken,widowed"
        ),
        novelty=0.2,
        goal_relevance=-0.85,
        coping_potential=0.15,
        norm_congruence=0.0,
        self_relevance=0.85,
    ),
    _rule(
        "threat",
        (
            "danger,dangerous,threat,threatened,threatening,panic,panicked,panicking,terrified,"
            "terrifying,scared,afraid,frightened,emergency,attacked,assault,accident,injured,"
            "fire,help me,unsafe"
        ),
        novelty=0.65,
        goal_relevance=-0.75,
        coping_potential=0.15,
        norm_congruence=-0.2,
        self_relevance=0.85,
    ),
    _rule(
        "success",
        (
            "success,succeeded,successful,won,win,winning,victory,achieved,achievement,"
            "accomplished,promoted,promotion,graduated,passed the exam,nailed it,finished the,"
            "made it,milestone"
        ),
        novelty=0.25,
        goal_relevance=0.85,
        coping_potential=0.85,
        norm_congruence=0.3,
        self_relevance=0.8,
    ),
    _rule(
        "praise",
        (
            "praised,praise,complimented,compliment,thanked,grateful,appreciated,admired,"
            "congratulated,congratulations,applause,applauded,well done,great job,proud of me,"
            "recognised,recognized"
        ),
        novelty=0.15,
        goal_relevance=0.65,
        coping_potential=0.7,
        norm_congruence=0.75,
        self_relevance=0.75,
    ),
    _rule(
        "conflict",
        (
            "argued,argument,fight,fought,quarrel,yelled,shouted,screamed at,angry,furious,"
            "annoyed,irritated,rage,blamed,blame,insulted,accused,criticised,criticized"
        ),
        novelty=0.35,
        goal_relevance=-0.6,
        coping_potential=0.65,
        norm_congruence=-0.5,
        self_relevance=0.75,
    ),
    _rule(
        "surprise",
        (
            "unexpected,unexpectedly,surprise,surprised,surprising,suddenly,out of nowhere,"
            "shocked,shocking,astonished,stunned,didn't expect,did not expect,out of the blue,"
            "plot twist"
        ),
        novelty=0.9,
        coping_potential=0.45,
        self_relevance=0.55,
    ),
    _rule(
        "relief",
        (
            "relieved,relief,calm,calmer,peaceful,resolved,settled,safe now,finally over,"
            "relaxed,sorted out,at ease,phew,all good,worked out"
        ),
        novelty=-0.3,
        goal_relevance=0.55,
        coping_potential=0.85,
        norm_congruence=0.25,
        self_relevance=0.5,
    ),
    _rule(
        "injustice",
        (
            "unfair,unjust,injustice,cheated,cheating,lied,lied to,betrayed,betrayal,corrupt,"
            "corruption,stole,stolen,discrimination,discriminated,abused,exploited,hypocrite"
        ),
        novelty=0.3,
        goal_relevance=-0.45,
        coping_potential=0.4,
        norm_congruence=-0.9,
        self_relevance=0.65,
    ),
    _rule(
        "novelty",
        (
            "first time,for the first time,never before,brand new,new,discovered,discovery,"
            "explored,exploring,novel,unfamiliar,strange,curious,tried out"
        ),
        novelty=0.7,
        goal_relevance=0.2,
        coping_potential=0.6,
        self_relevance=0.5,
    ),
    _rule(
        "failure",
        (
            "failed,failure,fail,rejected,rejection,mistake,screwed up,setback,fired,laid off,"
            "flunked,missed the deadline,embarrassed,humiliated,disappointed"
        ),
        novelty=0.2,
        goal_relevance=-0.7,
        coping_potential=0.3,
        norm_congruence=-0.15,
        self_relevance=0.85,
    ),
    _rule(
        "affection",
        (
            "love,loved,hug,hugged,kissed,together,friendship,reunited,cuddled,cared for,"
            "welcomed,belong"
        ),
        novelty=0.05,
        goal_relevance=0.7,
        coping_potential=0.7,
        norm_congruence=0.6,
        self_relevance=0.75,
    ),
    _rule(
        "routine",
        (
            "routine,as usual,as always,usual,ordinary,boring,bored,mundane,every day,same old,"
            "nothing happened,uneventful"
        ),
        novelty=-0.7,
        goal_relevance=0.0,
        coping_potential=0.65,
        norm_congruence=0.1,
        self_relevance=0.3,
    ),
)


#: Italian rules of :meth:`KeywordAppraisalEngine.make_multilingual` (same themes and
#: appraisals as the English defaults of the same name).
ITALIAN_KEYWORD_RULES: tuple[KeywordRule, ...] = tuple(
    KeywordRule(
        name=f"{theme}_it",
        keywords=words.split(","),
        appraisal=next(r for r in DEFAULT_KEYWORD_RULES if r.name == theme).appraisal,
    )
    for theme, words in (
        ("loss", "morto,morta,morti,lutto,funerale,scomparso,scomparsa,ho perso,perdita"),
        ("threat", "paura,pericolo,pericoloso,spaventato,spaventata,terrorizzato,aiuto,"
                   "incidente,emergenza,minaccia"),
        ("success", "ho vinto,vinto,vittoria,successo,promosso,promossa,promozione,"
                    "laureato,laureata,traguardo,ce l'ho fatta"),
        ("praise", "complimenti,grazie,elogiato,orgoglioso,orgogliosa,congratulazioni,"
                   "ben fatto,bravo,brava"),
        ("conflict", "litigato,litigio,arrabbiato,arrabbiata,furioso,furiosa,urlato,"
                     "insultato,colpa,rabbia"),
        ("surprise", "sorpresa,sorpreso,improvvisamente,inaspettato,inaspettata,"
                     "scioccato,incredibile"),
        ("relief", "sollievo,tranquillo,tranquilla,calmo,calma,rilassato,rilassata,"
                   "finalmente finito,tutto bene"),
        ("injustice", "ingiusto,ingiustizia,imbrogliato,tradito,tradimento,corrotto,"
                      "rubato,discriminato"),
        ("failure", "fallito,fallimento,bocciato,bocciata,licenziato,licenziata,errore,"
                    "sbaglio,deluso,delusa,umiliato"),
        ("affection", "amore,amo,abbraccio,abbracciato,amicizia,insieme,bacio"),
        ("routine", "noioso,noiosa,noia,solito,solita,routine,come sempre,niente di nuovo"),
    )
)


def _compile_rule(rule: KeywordRule) -> re.Pattern[str]:
    """Regex of the rule: its pattern, or its keywords as whole words (longest first)."""
    if rule.pattern is not None:
        return re.compile(rule.pattern, re.IGNORECASE)
    parts = [
        r"\s+".join(re.escape(word) for word in kw.split())
        for kw in sorted(rule.keywords, key=len, reverse=True)
    ]
    return re.compile(r"(?<!\w)(?:" + "|".join(parts) + r")(?!\w)", re.IGNORECASE)


class KeywordAppraisalEngine:
    """Rule-based appraisal: keyword rules vote, votes are averaged.

    Every rule whose keywords occur in the content (whole words / phrases,
    case-insensitive) fires with ``hits`` = the number of non-overlapping matches.
    For each dimension, the result is the average of the values of the fired rules
    that mention that dimension, weighted by ``rule.weight * hits``; dimensions no
    fired rule mentions take the value of ``default``. If no rule fires, ``default``
    is returned unchanged. Results are clamped into range, so always valid.
    """

    def __init__(
        self,
        rules: Sequence[KeywordRule] | None = None,
        default: AppraisalVector | None = None,
    ) -> None:
        """Create the engine.

        Args:
            rules: Rules to apply; ``None`` uses :data:`DEFAULT_KEYWORD_RULES`. An
                empty list is allowed (every call then returns ``default``).
            default: Appraisal returned when no rule fires (and the source of the
                dimensions no fired rule mentions); ``None`` means the neutral
                :meth:`AppraisalVector.neutral` (as the original).

        Raises:
            TypeError: If ``rules`` is not a sequence of :class:`KeywordRule` or
                ``default`` is not an :class:`AppraisalVector`.
        """
        if rules is None:
            rules = DEFAULT_KEYWORD_RULES
        if isinstance(rules, str) or not isinstance(rules, Sequence):
            raise TypeError(f"rules must be a list of KeywordRule, got {type(rules).__name__}")
        for i, rule in enumerate(rules):
            if not isinstance(rule, KeywordRule):
                raise TypeError(f"rules[{i}] must be a KeywordRule, got {type(rule).__name__}")
        if default is None:
            default = _KEYWORD_DEFAULT
        if not isinstance(default, AppraisalVector):
            raise TypeError(
                f"default must be an AppraisalVector or None, got {type(default).__name__}"
            )
        kinds = {rule.is_pattern_rule for rule in rules}
        if len(kinds) > 1:
            raise ValueError(
                "rules mixes original-form (pattern) and phrase-form (keywords) rules"
            )
        self._rules: tuple[KeywordRule, ...] = tuple(rules)
        self._patterns: tuple[re.Pattern[str], ...] = tuple(_compile_rule(r) for r in self._rules)
        self._default = default
        self._delta_mode = kinds == {True}

    @property
    def rules(self) -> tuple[KeywordRule, ...]:
        """The rules, in the order given."""
        return self._rules

    @property
    def default(self) -> AppraisalVector:
        """The appraisal used when no rule fires."""
        return self._default

    def matches(self, content: str) -> list[tuple[KeywordRule, int]]:
        """List the rules that fire on ``content`` with their hit counts.

        Args:
            content: The event description.

        Returns:
            ``(rule, hits)`` pairs with ``hits >= 1``, in rule order.

        Raises:
            TypeError: If ``content`` is not a ``str``.
        """
        text = _check_content(content, "content")
        fired: list[tuple[KeywordRule, int]] = []
        for rule, pattern in zip(self._rules, self._patterns, strict=True):
            hits = sum(1 for _ in pattern.finditer(text))
            if hits:
                fired.append((rule, hits))
        return fired

    def appraise(
        self, event_text: str, context: dict[str, Any] | None = None
    ) -> AppraisalVector:
        """Appraise ``event_text`` by averaging the votes of the rules that fire.

        Args:
            event_text: The event description.
            context: Optional extra information (accepted for protocol
                compatibility; the keyword engine does not use it).

        Returns:
            The averaged, range-clamped appraisal, or ``default`` if no rule fires.

        Raises:
            TypeError: If ``event_text`` is not a ``str`` or ``context`` is not a dict.
        """
        _check_context(context)
        fired = self.matches(event_text)
        if self._delta_mode:
            return _from_deltas([rule for rule, _ in fired])
        if not fired:
            return self._default
        values = self._default.model_dump()
        for dim in APPRAISAL_DIMENSIONS:
            total = 0.0
            weight_sum = 0.0
            for rule, hits in fired:
                if dim in rule.appraisal:
                    w = rule.weight * hits
                    total += w * rule.appraisal[dim]
                    weight_sum += w
            if weight_sum > 0:
                values[dim] = total / weight_sum
        return _clamp_to_range(values)

    @classmethod
    def make_multilingual(
        cls, rules: Sequence[KeywordRule] | None = None
    ) -> KeywordAppraisalEngine:
        """An engine with the default English rules plus Italian ones.

        Args:
            rules: Extra rules appended after the built-in English and Italian ones.

        Returns:
            The engine.
        """
        return cls([*DEFAULT_KEYWORD_RULES, *ITALIAN_KEYWORD_RULES, *(rules or ())])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rules={len(self._rules)}, default={self._default!r})"


def _from_deltas(fired: Sequence[KeywordRule]) -> AppraisalVector:
    """Original-form rules: per dimension, the mean of the non-zero deltas that fired,
    from the neutral appraisal (coping 0.5), clamped; neutral when nothing fired."""
    values = AppraisalVector.neutral().model_dump()
    for dim in APPRAISAL_DIMENSIONS:
        votes = [rule.scores[dim] for rule in fired if rule.scores[dim] != 0.0]
        if votes:
            values[dim] += sum(votes) / len(votes)
    return AppraisalVector(**values)
