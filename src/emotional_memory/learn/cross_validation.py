"""Scenario-grouped k-fold cross-validation, evaluated through the real engine."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emotional_memory._progress import progress_iter
from emotional_memory._validation import positive_int
from emotional_memory.engine import EmotionalMemoryConfig
from emotional_memory.interfaces import Embedder
from emotional_memory.learn.losses import unrouted
from emotional_memory.learn.recall_batch import RecallBatch, RecallInfo, build_recall_batch
from emotional_memory.learn.selection import LEXICAL_ANALYSES, analysis_config, select_model
from emotional_memory.learn.training import fit
from emotional_memory.learn.tuning import fit_auto
from emotional_memory.replay import (
    QueryResult,
    ReplayAffect,
    replay_dataset,
    summarize,
    validate_dataset,
)


def scenario_folds(n_scenarios: int, folds: int, seed: int = 0) -> list[np.ndarray]:
    """Split scenario indices into ``folds`` groups (deterministic shuffle).

    Args:
        n_scenarios: Number of scenarios S.
        folds: Number of groups, in [2, S].
        seed: Shuffle seed.

    Returns:
        A list of sorted int arrays of scenario indices in [0, S), one per fold.

    Raises:
        TypeError: ``n_scenarios`` or ``folds`` is not an int (or is a bool).
        ValueError: If ``folds`` lies outside [2, S].
    """
    n_scenarios = positive_int("n_scenarios", n_scenarios)
    folds = positive_int("folds", folds)
    if folds < 2 or folds > n_scenarios:
        raise ValueError(f"folds must lie in [2, {n_scenarios}], got {folds}")
    perm = np.random.default_rng(seed).permutation(n_scenarios)
    return [np.sort(part) for part in np.array_split(perm, folds)]


def subset_dataset(data: dict[str, Any], scenario_ids: Sequence[str]) -> dict[str, Any]:
    """The dataset restricted to the given scenarios (file order kept).

    Args:
        data: A realistic-recall dataset.
        scenario_ids: Ids of the scenarios to keep, compared as strings (as
            :class:`RecallInfo` holds them: an integer id 3 is kept by ``"3"``).

    Returns:
        A shallow copy of ``data`` whose ``scenarios`` list holds only those scenarios.

    Raises:
        TypeError: ``scenario_ids`` is one string (its letters would be the ids).
    """
    if isinstance(scenario_ids, str | bytes):
        raise TypeError(f"scenario_ids must be a sequence of ids, got the string "
                        f"{scenario_ids!r} (write [{scenario_ids!r}])")
    keep = {str(s) for s in scenario_ids}
    return {**data, "scenarios": [s for s in data["scenarios"]
                                  if str(s.get("scenario_id", "")) in keep]}


@dataclass
class CVResult:
    """Out-of-fold cross-validation outcome.

    Attributes:
        metrics: out-of-fold engine-replay metrics of the fitted configs.
        default_metrics: engine-replay metrics of the starting configuration.
        fold_metrics: per fold, out-of-fold metrics.
        results: the out-of-fold per-query results.
        chosen: per fold, what the selection chose (model name or hyper-parameters).
    """

    metrics: dict[str, Any]
    default_metrics: dict[str, Any]
    fold_metrics: list[dict[str, Any]]
    results: list[QueryResult]
    chosen: list[Any] = field(default_factory=list)


def cross_validate(
    data: dict[str, Any],
    embedder: Embedder,
    config: EmotionalMemoryConfig | None = None,
    *,
    folds: int = 5,
    seed: int = 0,
    progress: bool = False,
    batch: tuple[RecallBatch, RecallInfo] | None = None,
    select: bool | str = True,
    affect: ReplayAffect | None = None,
    lexical: bool = False,
    analyses: Sequence[str] = (),
    adapter: bool = False,
    context: bool = False,
    jobs: int = 1,
    tune_embedder: Any = None,
    tune_folds: int = 2,
    **fit_kwargs: Any,
) -> CVResult:
    """k-fold cross-validation grouped by scenario, evaluated through the engine.

    Each fold fits on the other folds' scenarios and replays its own scenarios
    through a real engine with the fitted configuration (so pass-1 seeds and
    activation are recomputed, not held fixed).

    Args:
        data: the dataset.
        embedder: text embedder.
        config: starting configuration.
        folds: number of folds (>= 2).
        seed: fold assignment seed.
        progress: progress bars.
        batch: a prebuilt ``(batch, info)`` for ``data`` (built when None).
        select: ``True``: choose ``l2``/``temperature`` inside each fold by inner CV
            (:func:`fit_auto`, nested CV); ``"model"``: choose the model inside each
            fold by inner CV (:func:`select_model`: default, cosine, fitted variants);
            False uses ``fit_kwargs`` as given.
        affect: unlabelled events and queries (default: estimated when needed).
        lexical: capture lexical statistics when building the batch (full-bank
            candidates), so lexical models can be fitted.
        analyses: with ``select="model"``, extra lexical analyses
            (:data:`LEXICAL_ANALYSES`) whose models compete (one batch built per
            analysis).
        adapter: with ``select="model"``, let the query-adapter variant compete (the
            batches keep their embeddings, as they do when ``fit_kwargs``'
            ``trainable`` holds ``"adapter"``).
        context: capture the candidates' encode-order neighbours when building the
            batches (with ``lexical``: the context models compete).
        jobs: folds run at once, each in its own (spawned) process; 1 runs them here,
            one after another. The result does not depend on it.
        tune_embedder: an :class:`~emotional_memory.learn.embedder_tuning.EmbedderTuning`
            to also fine-tune the MiniLM in each fold after the fit (on the fold's
            training queries; kept when its inner CV over ``tune_folds`` folds says it
            pays), the held-out scenarios then embedded with it; None: no tuning.
        tune_folds: inner folds of that decision.
        **fit_kwargs: passed to :func:`fit` / :func:`fit_auto` / :func:`select_model`.

    Returns:
        :class:`CVResult`.

    Raises:
        ValueError: a malformed dataset (:func:`~emotional_memory.replay.validate_dataset`),
            ``folds`` outside [2, number of scenarios with queries], ``select`` other
            than True, False or ``"model"``, ``jobs`` / ``tune_folds`` < 1, an unknown
            analysis, ``analyses`` or ``adapter`` without ``select="model"`` and
            ``lexical`` (ignored there), or a config that routes its base weights
            per query type (fits ignore routing).
        TypeError: ``folds``, ``jobs`` or ``tune_folds`` is not an int (or is a bool),
            ``analyses`` is one string.
    """
    if select not in (True, False, "model") or not isinstance(select, bool | str):
        raise ValueError(f"select must be True, False or 'model', got {select!r}")
    if positive_int("folds", folds) < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    positive_int("jobs", jobs)
    positive_int("tune_folds", tune_folds)
    analyses = _model_options(select, analyses, adapter, fit_kwargs.get("trainable"),
                              lexical)
    validate_dataset(data)
    cfg = unrouted(config if config is not None else EmotionalMemoryConfig())
    settings = affect if affect is not None else ReplayAffect.prepare(data)
    # the batch keeps its embeddings for an adapter that competes or is fitted
    embeddings = adapter or "adapter" in (fit_kwargs.get("trainable") or ())
    rb, info = batch if batch is not None else build_recall_batch(
        data, embedder, cfg, lexical=lexical, affect=settings, embeddings=embeddings,
        context=context, progress=progress,
    )
    if select == "model":
        fit_kwargs["adapter"] = adapter
        built = {
            name: build_recall_batch(data, embedder, analysis_config(cfg, name),
                                     lexical=lexical, affect=settings,
                                     embeddings=adapter, context=context,
                                     progress=progress)
            for name in analyses
        }
        fit_kwargs["analysis_batches"] = {name: b for name, (b, _) in built.items()}
        analysis_infos = {name: i for name, (_, i) in built.items()}
    else:
        analysis_infos = {}
    parts = scenario_folds(len(info.scenario_ids), folds, seed)
    fitter = select_model if select == "model" else fit_auto if select else fit
    work = _FoldWork(fitter, rb, info, cfg, seed, dict(fit_kwargs), data, embedder, settings,
                     tune_embedder, tune_folds, analysis_infos)
    oof: list[QueryResult] = []
    per_fold: list[dict[str, Any]] = []
    chosen: list[Any] = []
    for choice, fold_results in _run_folds(work, parts, jobs, progress):
        chosen.append(choice)
        per_fold.append(summarize(fold_results))
        oof.extend(fold_results)
    default = summarize(replay_dataset(data, embedder, cfg, top_k=info.top_k, affect=settings,
                                       progress=progress))
    return CVResult(
        metrics=summarize(oof), default_metrics=default, fold_metrics=per_fold, results=oof,
        chosen=chosen,
    )


def _model_options(select: bool | str, analyses: Sequence[str], adapter: bool,
                   trainable: Any, lexical: bool) -> tuple[str, ...]:
    """``analyses`` checked, and refused with ``adapter`` where ``select`` would ignore
    them (only the model selection scores analyses and lets the adapter compete).

    Raises:
        TypeError: ``analyses`` is one string.
        ValueError: an unknown analysis, analyses without ``select="model"``, or
            ``adapter`` without it (and without ``"adapter"`` in ``trainable``), or
            either with it but without ``lexical`` (no lexical model takes them).
    """
    if isinstance(analyses, str | bytes):
        raise TypeError(f"analyses must be a sequence of analysis names, got the string "
                        f"{analyses!r} (write [{analyses!r}])")
    names = tuple(analyses)
    unknown = [n for n in names if n not in LEXICAL_ANALYSES]
    if unknown:
        raise ValueError(f"analysis must be one of {tuple(LEXICAL_ANALYSES)}, got "
                         f"{unknown[0]!r}")
    if names and select != "model":
        raise ValueError(f"analyses compete in the model selection (select='model'), "
                         f"which select={select!r} does not run")
    if adapter and select != "model" and "adapter" not in (trainable or ()):
        raise ValueError(f"adapter=True lets the adapter model compete in the model "
                         f"selection (select='model'), which select={select!r} does not "
                         "run: put 'adapter' in trainable to fit one")
    if select == "model" and not lexical and (names or adapter):
        raise ValueError(f"{'analyses' if names else 'adapter=True'} applies to the "
                         "lexical models, which compete only with lexical=True")
    return names


@dataclass(frozen=True)
class _FoldWork:
    """Everything one fold needs besides its held-out scenario indices."""

    fitter: Callable[..., Any]
    batch: RecallBatch
    info: RecallInfo
    config: EmotionalMemoryConfig
    seed: int
    fit_kwargs: dict[str, Any]
    data: dict[str, Any]
    embedder: Embedder
    affect: ReplayAffect
    tuning: Any = None
    tune_folds: int = 2
    analysis_infos: dict[str, RecallInfo] = field(default_factory=dict)

    def run(self, held: np.ndarray) -> tuple[Any, list[QueryResult]]:
        """Fit on every scenario but ``held`` and replay ``held`` through the engine.

        Args:
            held: ``(h,)`` scenario indices of the held-out fold.

        Returns:
            ``(chosen, results)``: what the selection chose, and the held-out queries'
            replay results in dataset order.
        """
        train_mask = ~np.isin(np.asarray(self.batch.scenario), held)
        result = self.fitter(self.batch, self.info, self.config, train_mask=train_mask,
                             seed=self.seed, **self.fit_kwargs)
        held_data = subset_dataset(self.data, [self.info.scenario_ids[i] for i in held])
        chosen = result.selection.get("chosen")
        if self.tuning is None:
            return chosen, replay_dataset(held_data, self.embedder, result.config,
                                          top_k=self.info.top_k, affect=self.affect)
        return self._tuned(result, chosen, train_mask, held_data)

    def _tuned(
        self, result: Any, chosen: Any, train_mask: np.ndarray, held_data: dict[str, Any]
    ) -> tuple[Any, list[QueryResult]]:
        """Tune the MiniLM on the fold's training queries (kept only when its inner CV
        says it pays) and replay the held-out scenarios with it."""
        import tempfile
        from pathlib import Path

        from emotional_memory.embedders.fitted import FittedMiniLMEmbedder, save_fitted_weights
        from emotional_memory.embedders.minilm import MiniLMEmbedder
        from emotional_memory.learn.embedder_tuning import tune_embedder

        name = str(chosen or "")
        batch, info = self.batch, self.info
        if "@" in name:  # a lexical analysis' batch has candidates of its own
            analysis = name.split("@", 1)[1]
            batch = self.fit_kwargs["analysis_batches"][analysis]
            info = self.analysis_infos[analysis]
        base = self.embedder if isinstance(self.embedder, MiniLMEmbedder) else MiniLMEmbedder()
        tuned = tune_embedder(self.data, batch, info, result.config, base, self.tuning,
                              folds=self.tune_folds, train_mask=train_mask)
        if tuned.model is None:
            return f"{name} (untuned)", replay_dataset(
                held_data, self.embedder, result.config, top_k=self.info.top_k,
                affect=self.affect)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "fold.embedder.safetensors"
            save_fitted_weights(tuned.model, base.model, path,
                                base_name=base.identity.rsplit("/", 1)[0])
            embedder = FittedMiniLMEmbedder(path, base.model_dir)
            return f"{name} (tuned)", replay_dataset(
                held_data, embedder, tuned.config, top_k=self.info.top_k, affect=self.affect)


_WORK: _FoldWork | None = None


def _init_worker(work: _FoldWork) -> None:
    """Process-pool initialiser: keep the fold inputs (sent once per worker)."""
    global _WORK
    _WORK = work


def _run_in_worker(held: np.ndarray) -> tuple[Any, list[QueryResult]]:
    assert _WORK is not None, "the pool's initialiser did not run"
    return _WORK.run(held)


def default_jobs(folds: int) -> int:
    """Worker processes the CLI runs folds in by default.

    One per CPU core this process may use, at most one per fold, and at most one per
    4 GiB of available memory (a fold's fit peaks near 4 GB on the LoCoMo dev half);
    1 where the available memory cannot be read.

    Args:
        folds: number of folds.

    Returns:
        The number of processes, >= 1.
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return 1
    return max(1, min(folds, cores or 1, int(available // (4 << 30))))


def _run_folds(
    work: _FoldWork, parts: Sequence[np.ndarray], jobs: int, progress: bool
) -> Iterator[tuple[Any, list[QueryResult]]]:
    """Each fold's ``(chosen, results)``, in fold order, on ``jobs`` processes."""
    if jobs <= 1 or len(parts) <= 1:
        for held in progress_iter(parts, "cv", enabled=progress):
            yield work.run(held)
        return
    # spawn: a forked JAX runtime is unsafe; each worker receives ``work`` once
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(parts)), mp_context=ctx, initializer=_init_worker,
                             initargs=(work,)) as pool:
        futures = [pool.submit(_run_in_worker, held) for held in parts]
        for future in progress_iter(futures, "cv", enabled=progress):
            yield future.result()
