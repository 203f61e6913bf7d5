"""Command line for fitting, cross-validating and evaluating the scoring model.

    python -m training fit      --dataset D.json --embeddings E.npz --out CONFIG.json
    python -m training cv       --dataset D.json --embeddings E.npz --folds 5 --json
    python -m training evaluate --dataset D.json --embeddings E.npz [--config C.json] --json
    python -m training affect   --emobank EMOBANK.csv --out HEAD.npz   (training/affect.py)

``--dataset builtin`` (the default) uses the project's own labelled scenarios; without
``--embeddings`` the deterministic :class:`HashingEmbedder` embeds the texts. Progress
bars go to stderr; ``--json`` prints exactly one JSON object on stdout.

Without ``--trainable``, ``fit`` and ``cv`` choose the model by inner scenario-grouped
CV among the default config, plain cosine and fitted variants (with the lexical
signal unless ``--no-lexical``), so the choice never loses to the better of default
and cosine on the inner folds. Events without affect labels get a text model's
estimate (``--affect estimate``, the default) or the neutral point
(``--affect neutral``); ``--query-affect estimate`` sets each query's estimated affect
as the state (default ``keep``: the original protocol).

The default selection is the fast one: the extra lexical analyses are scored only on
the winner of the unstemmed models (``--full-selection``: on every lexical model), the
winner is fitted at l2 0.01 / temperature 0.05 (``--tune``: chosen by inner CV) and a
query adapter at rank 16 / pull 0.1 (``--tune-adapter``: chosen by inner CV). The
fitted config carries a relevance calibration (Platt scaling of the winner's
out-of-fold scores, ``--no-calibration`` leaves it out): ``retrieve(...,
min_relevance=p)`` then drops results whose calibrated relevance is below ``p``.

``fit --tune-embedder {last-layers,lora}`` also fine-tunes the MiniLM when inner CV
says it pays (training/tune_embedder.py): the weights go beside the config, which names
them, and ``evaluate`` / ``cv`` with that config embed with them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from emotional_memory import EmotionalMemoryConfig
from emotional_memory._extras import installed
from emotional_memory._validation import validation_summary
from emotional_memory.embedders.fitted import write_fitted_config
from emotional_memory.interfaces import Embedder
from emotional_memory.learn import (
    LEXICAL_ANALYSES,
    TRAINABLE_GROUPS,
    analysis_config,
    build_recall_batch,
    cross_validate,
    fit,
    fit_auto,
    select_model,
)
from emotional_memory.learn.cross_validation import default_jobs
from emotional_memory.replay import (
    LookupEmbedder,
    ReplayAffect,
    load_dataset,
    replay_dataset,
    summarize,
)
from training import tune_embedder
from training.options import check_options
from training.options import wants_adapter as _wants_adapter

METRICS = ("top1", "hit_at_k", "mrr", "ndcg_at_k", "recall_at_k")


def _unreadable(option: str, path: str, exc: OSError) -> OSError:
    """``exc`` as one line naming ``option`` and ``path`` (a missing file, a folder)."""
    return type(exc)(f"{option} {path}: cannot read it ({exc.strerror or exc})")


def _load_data(name: str) -> dict[str, Any]:
    if name == "builtin":
        from emotional_memory.data import load_builtin_dataset

        return load_builtin_dataset()
    try:
        return load_dataset(name)
    except OSError as exc:
        raise _unreadable("--dataset", name, exc) from None


def _dataset_texts(data: dict[str, Any]) -> list[str]:
    """Every event and query text of a dataset, each once, in order."""
    texts: dict[str, None] = {}
    for scenario in data["scenarios"]:
        for session in scenario["sessions"]:
            texts.update((e["content"], None) for e in session.get("events", []))
            texts.update((q["query"], None) for q in session.get("queries", []))
    return list(texts)


def _embedder(path: str | None, data: dict[str, Any]) -> Embedder:
    """The hashing embedder, or the ``--embeddings`` table, which must hold every text
    of ``data`` (checked before any replay)."""
    if path is None:
        from emotional_memory.embedders import HashingEmbedder

        return HashingEmbedder(dim=384)
    try:
        table = LookupEmbedder.from_npz(path)
    except OSError as exc:
        raise _unreadable("--embeddings", path, exc) from None
    missing = [t for t in _dataset_texts(data) if t not in table]
    if missing:
        raise ValueError(f"embeddings {path}: lacks {len(missing)} text(s) of the dataset, "
                         f"the first {missing[0][:60]!r} (embed every event and query)")
    return table


def _config(path: str | None) -> EmotionalMemoryConfig:
    if path is None:
        return EmotionalMemoryConfig()
    from emotional_memory.embedders.fitted import read_fitted_config

    try:  # a fitted config may name its embedder's weights (training/tune_embedder.py)
        return read_fitted_config(path)[0]
    except OSError as exc:
        raise _unreadable("--config", path, exc) from None
    except ValidationError as exc:  # unknown or misspelt keys, bad values: one line
        raise ValueError(f"config {path}: not an EmotionalMemoryConfig "
                         f"({validation_summary(exc)})") from None
    except ValueError as exc:  # not JSON, a bad embedder entry: name the file
        raise ValueError(f"config {path}: {exc}") from exc


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an int >= ``low`` (argparse names the option when not)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def _float_above(low: float, strict: bool) -> Callable[[str], float]:
    """An argparse ``type``: a finite float > ``low`` (``strict``) or >= ``low``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(
                f"must be a finite number {'>' if strict else '>='} {low:g}, got {text}")
        return value

    return parse


def _trainable(text: str) -> tuple[str, ...]:
    groups = tuple(g.strip() for g in text.split(",") if g.strip())
    bad = [g for g in groups if g not in TRAINABLE_GROUPS]
    if bad or not groups:
        raise argparse.ArgumentTypeError(
            f"--trainable takes a comma list of {TRAINABLE_GROUPS}"
        )
    return groups


def _affect(args: argparse.Namespace, data: dict[str, Any]) -> ReplayAffect:
    """The replay's affect settings; unless ``--quiet``, the text model's estimate of
    unlabelled texts (a minute on a few thousand, no bar: its batches are its own) is
    announced on stderr before it runs and timed after."""
    estimator = None
    if not args.quiet:
        def estimator(texts: list[str]) -> Any:
            from emotional_memory.appraisal_embedding import EmbeddingAppraisalEngine

            print(f"affect: estimating the affect of {len(texts)} unlabelled texts with "
                  "the text model (--affect neutral with --query-affect keep skips it)"
                  " ...", file=sys.stderr,
                  flush=True)
            t0 = time.perf_counter()
            values = EmbeddingAppraisalEngine().predict_affect(texts)
            print(f"affect: {len(texts)} texts in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
            return values
    return ReplayAffect.prepare(data, events=args.affect, queries=args.query_affect,
                                estimator=estimator)


def _lexical_start(args: argparse.Namespace, start: EmotionalMemoryConfig) -> EmotionalMemoryConfig:
    """A start config from which the lexical and context groups can grow (weight 0 has
    no gradient)."""
    update: dict[str, Any] = {}
    if args.trainable and "lexical" in args.trainable and start.retrieval.lexical_weight == 0:
        update["lexical_weight"] = 0.35
    if args.trainable and "context" in args.trainable and start.retrieval.context_weight == 0:
        update["context_weight"] = 0.3
    if update:
        return start.model_copy(update={"retrieval": start.retrieval.model_copy(update=update)})
    return start


def _wants_lexical(args: argparse.Namespace) -> bool:
    if args.trainable is None:
        return bool(args.lexical)
    return "lexical" in args.trainable or "context" in args.trainable


def _wants_context(args: argparse.Namespace) -> bool:
    """Whether the batch keeps the candidates' neighbours: s8 is trained or competes."""
    if args.trainable is None:
        return bool(args.lexical and args.context)
    return "context" in args.trainable


def _analyses(args: argparse.Namespace) -> tuple[str, ...]:
    """The extra lexical analyses whose models compete (none without the lexical ones)."""
    if args.trainable is not None or not args.lexical:
        return ()
    return args.analyses


def _check_analyses_installed(args: argparse.Namespace) -> None:
    """Refuse, before any replay, a selection whose analyses need a missing package.

    Raises:
        ValueError: ``stem`` competes (the default) but PyStemmer is not installed.
    """
    if "stem" in _analyses(args) and not installed("Stemmer"):
        raise ValueError(
            "the model selection also scores the stemmed lexical analysis (--analyses "
            "stem, the default), which needs PyStemmer: pip install "
            "'emotional-memory-jax[stem]', or pass --analyses none"
        )


def _analysis_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")
    bad = [n for n in names if n not in LEXICAL_ANALYSES]
    if bad:
        raise argparse.ArgumentTypeError(
            f"--analyses takes a comma list of {tuple(LEXICAL_ANALYSES)} or 'none'"
        )
    return names


def _select_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Fit arguments of the candidate models when the model is chosen (no --trainable)."""
    kwargs: dict[str, Any] = {"steps": args.steps, "select_by": args.select_by,
                              "tune": args.tune, "prune": not args.full_selection,
                              "calibrate": args.calibrate,
                              "tune_adapter": args.tune_adapter, **_adapter_kwargs(args)}
    for key in ("l2", "temperature"):
        if getattr(args, key) is not None:
            kwargs[key] = getattr(args, key)
    return kwargs


def _adapter_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    return {key: getattr(args, key) for key in ("adapter_rank", "adapter_l2")
            if getattr(args, key) is not None}


def _fit_kwargs(args: argparse.Namespace) -> tuple[dict[str, Any], bool]:
    """Keyword arguments for fit / fit_auto, and whether to run selection.

    Values given on the command line are fixed: with both given there is no
    selection; with one given, the grid search only varies the other.
    """
    kwargs: dict[str, Any] = {"trainable": args.trainable, "steps": args.steps,
                              **_adapter_kwargs(args)}
    fixed = {k: v for k, v in (("l2", args.l2), ("temperature", args.temperature))
             if v is not None}
    if len(fixed) == 2:
        return {**kwargs, **fixed}, False
    return {**kwargs, "grid": {k: (v,) for k, v in fixed.items()}}, True


def _print(obj: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(obj))
        return
    for key, value in obj.items():
        if isinstance(value, dict):
            print(f"{key}:")
            for k, v in value.items():
                print(f"  {k:24} {v:.3f}" if isinstance(v, float) else f"  {k:24} {v}")
        else:
            print(f"{key:26} {value:.3f}" if isinstance(value, float) else f"{key:26} {value}")


def _peak_rss_mb() -> float | None:
    """This process's peak resident memory in MB (None where not reported)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(peak) / (1e6 if sys.platform == "darwin" else 1e3)


def check_out_file(option: str, value: str, *, probe: bool = True) -> Path:
    """The file path an option writes, checked before the work that produces it.

    Args:
        option: the option's name (``--out``), for the errors.
        value: its value.
        probe: also make (and remove) a file in its folder, so a read-only place is
            found now (False for a file that may only be read, such as a cache).

    Returns:
        The path.

    Raises:
        FileNotFoundError: its folder does not exist.
        OSError: it cannot be looked at (a name too long), or no file can be made in
            its folder (a read-only place), naming ``option``.
        ValueError: it names a folder.
    """
    path = Path(value)
    try:
        folder, is_folder = path.parent.is_dir(), path.is_dir()
    except OSError as exc:  # a name too long, a folder that cannot be searched
        raise OSError(f"{option} {value}: cannot write it ({exc.strerror or exc})") from None
    if not folder:
        raise FileNotFoundError(f"{option}: directory {str(path.parent)!r} does not exist")
    if is_folder:
        raise ValueError(f"{option}: {str(path)!r} is a directory, not a file path")
    if not probe:
        return path
    try:  # a file can be made beside it (not a read-only place): found now, not after
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".probe"):
            pass
    except OSError as exc:
        raise OSError(f"{option} {value}: cannot write in its folder "
                      f"({exc.strerror or exc})") from None
    return path


def check_not_an_input(option: str, out: Path, inputs: dict[str, str | None]) -> None:
    """Refuse an output file that is one of the input files (any spelling of its path,
    a link to it): the output would replace the data it was made from.

    Args:
        option: the output's option (``--out``), for the error.
        out: its path.
        inputs: input option -> its path (None: not given).

    Raises:
        ValueError: naming both options.
    """
    for other, value in inputs.items():
        if value is None:
            continue
        same = out.resolve() == Path(value).resolve() or (
            out.is_file() and Path(value).is_file() and out.samefile(value))
        if same:
            raise ValueError(f"{option}: {str(out)!r} is the {other} file; write it "
                             "elsewhere")


def _check_plot_folder(plot: str | None, out: Path) -> None:
    """Refuse a ``--plot`` folder that cannot be made: it, or the nearest existing
    folder above it, is not a directory, it is (or lies below) the ``--out`` file, or
    making it fails (a read-only place, a name too long; what was made is removed), or
    matplotlib is not installed (checked before the fit, not after it). An existing
    folder that cannot be written is found when the plots are written (named then)."""
    if plot is None:
        return
    if not installed("matplotlib"):
        raise ImportError("--plot needs matplotlib: pip install "
                          "'emotional-memory-jax[viz]' (or leave --plot out)")
    path = Path(plot)
    target = out.resolve()
    if path.resolve() == target or target in path.resolve().parents:
        raise ValueError(f"--plot: {plot!r} is (or lies below) the --out file {str(out)!r}; "
                         "give the plots a folder of their own")
    try:
        existing = next((p for p in (path, *path.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            what = "exists" if existing == path else f"lies below the file {str(existing)!r}"
            raise ValueError(f"--plot: {plot!r} {what} and is not a directory")
        missing = [p for p in (path, *path.parents) if not p.exists()]  # deepest first
        try:  # it can be made (not in a read-only place): found now, none of it left
            path.mkdir(parents=True, exist_ok=True)
        finally:
            for made in missing:
                with contextlib.suppress(OSError):
                    made.rmdir()
    except OSError as exc:
        raise OSError(f"--plot {plot}: cannot make the folder ({exc.strerror or exc})"
                      ) from None


def _write_plots(plot: str, result: Any, start: EmotionalMemoryConfig,
                 default: dict[str, Any], fitted: dict[str, Any]) -> list[str]:
    """Draw the fit's PNGs into ``plot`` (each written whole); their paths.

    Raises:
        OSError: naming ``--plot`` and the file when one cannot be written (the
            config, written before, is kept).
    """
    from training import plots

    out = Path(plot)
    drawn: list[tuple[Callable[..., Path], tuple[Any, ...], str]] = [
        (plots.learning_curves, (result.history, result.best_step), "learning.png"),
        (plots.weights_heatmap, (result.config, start), "weights_vs_mood.png"),
        (plots.challenge_bars, (default["by_challenge"], fitted["by_challenge"]),
         "by_challenge.png"),
    ]
    written = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for draw, inputs, name in drawn:
            written.append(str(draw(*inputs, out / name)))
    except OSError as exc:
        raise OSError(f"--plot {plot}: cannot write {name} ({exc.strerror or exc}); "
                      "the config was written to --out") from None
    return written


def cmd_fit(args: argparse.Namespace) -> int:
    """Fit on the whole dataset and write the config.

    Args:
        args: Parsed ``fit`` arguments (dataset, embeddings, config, trainable, l2,
            temperature, steps, out, plot, json, quiet).

    Returns:
        Exit status 0; the report (replay metrics of the starting config as given, as
        ``default_*``, and of the fitted one) is printed.
    """
    check_options(args)
    out_path = check_out_file("--out", args.out)  # fail before the fit, not after it
    dataset = None if args.dataset == "builtin" else args.dataset  # not a file then
    check_not_an_input("--out", out_path,
                       {"--dataset": dataset, "--embeddings": args.embeddings})
    _check_plot_folder(args.plot, out_path)
    tune_embedder.tuning_options(args)  # its option errors before the fit, not after it
    _check_analyses_installed(args)
    data, start = _load_data(args.dataset), _config(args.config)
    # a config naming fitted weights embeds with them, as evaluate and cv do with it
    named = tune_embedder.fitted_embedder(args.config)
    if named is not None and args.tune_embedder:
        raise ValueError(f"--tune-embedder tunes the installed MiniLM, but --config "
                         f"{args.config} names fitted weights: start from a config "
                         "without an embedder entry")
    embedder = named or _embedder(args.embeddings, data)
    tune_embedder.check_tuned_width(args, embedder)
    if args.tune_embedder and args.embeddings is None:  # tuning starts from the MiniLM
        from emotional_memory.embedders.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    given, start = start, _lexical_start(args, start)  # the default reported: as given
    affect = _affect(args, data)
    t0 = time.perf_counter()
    selecting = args.trainable is None
    adapter = _wants_adapter(args)
    context = _wants_context(args)
    batch, info = build_recall_batch(data, embedder, start, progress=not args.quiet,
                                     lexical=_wants_lexical(args), affect=affect,
                                     embeddings=adapter, context=context)
    extra: dict[str, Any] = {}
    infos: dict[str, Any] = {}
    if selecting:
        built = {
            name: build_recall_batch(data, embedder, analysis_config(start, name),
                                     lexical=True, affect=affect, embeddings=adapter,
                                     context=context, progress=not args.quiet)
            for name in _analyses(args)
        }
        extra = {name: b for name, (b, _) in built.items()}
        infos = {name: i for name, (_, i) in built.items()}
        result = select_model(batch, info, start, progress=not args.quiet,
                              analysis_batches=extra, adapter=adapter,
                              **_select_kwargs(args))
    else:
        kwargs, select = _fit_kwargs(args)
        if select:
            result = fit_auto(batch, info, start, **kwargs)
        else:
            result = fit(batch, info, start, progress=not args.quiet, **kwargs)
    tuned: dict[str, Any] | None = None
    fitted_embedder, weights = embedder, getattr(named, "weights", None)
    if args.tune_embedder:
        chosen = str(result.selection.get("chosen", ""))
        used, used_info = batch, info
        if "@" in chosen:  # a lexical analysis' batch has candidates of its own
            used, used_info = extra[chosen.split("@", 1)[1]], infos[chosen.split("@", 1)[1]]
        result.config, fitted_embedder, weights, tuned = tune_embedder.tune_after_fit(
            args, data, used, used_info, result.config, embedder)
    seconds = time.perf_counter() - t0
    try:
        write_fitted_config(out_path, result.config, weights)
    except OSError as exc:  # disk full, no permission: the file named, the old one kept
        raise OSError(f"--out {out_path}: cannot write it ({exc.strerror or exc})") from None
    default = summarize(replay_dataset(data, embedder, given, progress=not args.quiet,
                                       affect=affect))
    fitted = summarize(replay_dataset(data, fitted_embedder, result.config,
                                      progress=not args.quiet, affect=affect))
    report = {
        "out": str(args.out),
        "seconds": seconds,
        "best_step": result.best_step,
        "selection": result.selection.get("chosen", {}),
        "default_top1": default["top1"],
        "fitted_top1": fitted["top1"],
        "fitted_hit_at_k": fitted["hit_at_k"],
        "fitted_mrr": fitted["mrr"],
        "fitted_ndcg_at_k": fitted["ndcg_at_k"],
        "fitted_recall_at_k": fitted["recall_at_k"],
        "default_by_challenge": default["by_challenge"],
        "fitted_by_challenge": fitted["by_challenge"],
        "relevance_calibration": result.selection.get("relevance_calibration"),
        "peak_rss_mb": _peak_rss_mb(),
    }
    if tuned is not None:
        report["embedder_tuning"] = tuned
    if args.plot:
        report["plots"] = _write_plots(args.plot, result, start, default, fitted)
    _print(report, args.json)
    return 0


def run_cv(args: argparse.Namespace) -> dict[str, Any]:
    """k-fold scenario-grouped cross-validation (out-of-fold through the engine).

    Args:
        args: Parsed ``cv`` arguments (``build_parser().parse_args(["cv", ...])``).

    Returns:
        The report: out-of-fold metrics, the starting config's as given
        (``default_*``: ``--config`` or the defaults, not the start ``--trainable
        lexical`` / ``context`` grow from), the queries, folds, jobs, seconds and
        what each fold chose.
    """
    check_options(args)
    _check_analyses_installed(args)
    data, start = _load_data(args.dataset), _config(args.config)
    scenarios = sum(any(s.get("queries") for s in sc["sessions"]) for sc in data["scenarios"])
    if scenarios < 2:  # the folds split scenarios
        raise ValueError(f"cv needs queries from at least 2 scenarios (its folds split "
                         f"scenarios); the dataset has {scenarios} with queries")
    if args.folds > scenarios:  # before the replays, not after them
        raise ValueError(f"--folds must lie in [2, {scenarios}] (the scenarios with "
                         f"queries), got {args.folds}")
    embedder = tune_embedder.fitted_embedder(args.config) or _embedder(args.embeddings, data)
    tune_embedder.check_tuned_width(args, embedder)
    given, start = start, _lexical_start(args, start)  # the default reported: as given
    select: bool | str
    if args.trainable is None:
        kwargs: dict[str, Any] = _select_kwargs(args)
        select = "model"
    else:
        kwargs, select = _fit_kwargs(args)
    if select == "model":
        kwargs.update(analyses=_analyses(args), adapter=_wants_adapter(args))
    jobs = args.jobs if args.jobs is not None else default_jobs(args.folds)
    tuning = tune_embedder.tuning_options(args)
    if tuning is not None and args.embeddings is None and args.config is None:
        from emotional_memory.embedders.minilm import MiniLMEmbedder

        embedder = MiniLMEmbedder()  # tuning starts from the MiniLM
    affect = _affect(args, data)
    t0 = time.perf_counter()
    result = cross_validate(
        data, embedder, start, folds=args.folds, seed=args.seed, progress=not args.quiet,
        jobs=jobs, tune_embedder=tuning, tune_folds=args.tune_folds,
        select=select, affect=affect, lexical=_wants_lexical(args),
        context=_wants_context(args), **kwargs,
    )
    seconds = time.perf_counter() - t0
    out: dict[str, Any] = {k: result.metrics[k] for k in METRICS}
    default = result.default_metrics if start is given else summarize(replay_dataset(
        data, embedder, given, progress=not args.quiet, affect=affect))
    out.update({f"default_{k}": default[k] for k in METRICS})
    out.update({
        "n_queries": result.metrics["n_queries"],
        "folds": args.folds,
        "jobs": min(jobs, args.folds),  # the processes that ran (one per fold at most)
        "seconds": seconds,
        "chosen": [c if isinstance(c, str | None) else dict(c) for c in result.chosen],
        "by_challenge": result.metrics["by_challenge"],
    })
    return out


def cmd_cv(args: argparse.Namespace) -> int:
    """``cv``: :func:`run_cv`, its report printed.

    Args:
        args: Parsed ``cv`` arguments.

    Returns:
        Exit status 0.
    """
    _print(run_cv(args), args.json)
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Replay the dataset through the engine with a config.

    Args:
        args: Parsed ``evaluate`` arguments (dataset, embeddings, config, json, quiet).

    Returns:
        Exit status 0; the replay metrics are printed.
    """
    data, cfg = _load_data(args.dataset), _config(args.config)
    embedder = tune_embedder.fitted_embedder(args.config) or _embedder(args.embeddings, data)
    metrics = summarize(replay_dataset(data, embedder, cfg, progress=not args.quiet,
                                       affect=_affect(args, data)))
    _print({k: metrics[k] for k in (*METRICS, "n_queries", "by_challenge")}, args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (sub-commands fit, cv, evaluate).

    Returns:
        A parser whose parsed namespace carries the sub-command handler in ``func``.
    """
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser,
               config: str = "starting EmotionalMemoryConfig JSON") -> None:
        p.add_argument("--dataset", default="builtin",
                       help="realistic-recall JSON, or 'builtin' (default)")
        p.add_argument("--embeddings", default=None,
                       help=".npz with 'texts' and 'embeddings' (default: hashing embedder)")
        p.add_argument("--config", default=None,
                       help=f"{config}; one naming fitted embedder weights embeds with "
                            "them (--embeddings ignored)")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument("--quiet", action="store_true", help="no progress bars")
        p.add_argument("--affect", choices=("estimate", "neutral"), default="estimate",
                       help="affect of events without labels (default: a text model's "
                            "estimate)")
        p.add_argument("--query-affect", choices=("keep", "estimate"), default="keep",
                       help="state of queries without one (default keep: the original "
                            "protocol)")

    def fitting(p: argparse.ArgumentParser) -> None:
        p.add_argument("--trainable", type=_trainable, default=None,
                       help=f"comma list of {', '.join(TRAINABLE_GROUPS)} (default: choose the "
                            "model by inner CV)")
        p.add_argument("--no-lexical", dest="lexical", action="store_false",
                       help="without --trainable: leave the lexical models out")
        p.add_argument("--analyses", type=_analysis_list, default=("stem",),
                       help="without --trainable: extra lexical analyses whose models "
                            f"compete, a comma list of {', '.join(LEXICAL_ANALYSES)} or "
                            "'none' (default: stem)")
        p.add_argument("--no-adapter", dest="adapter", action="store_false",
                       help="without --trainable: leave the query-adapter model out")
        p.add_argument("--select-by", choices=("mrr", "top1"), default="mrr",
                       help="without --trainable: the inner-CV criterion of the model "
                            "choice (default mrr, ties by top-1)")
        p.add_argument("--tune", dest="tune", action="store_true", default=False,
                       help="without --trainable: choose the winner's l2/temperature by "
                            "another inner CV (6 grid points x 3 folds; slow with the "
                            "query adapter) instead of l2 0.01, temperature 0.05")
        p.add_argument("--no-tune", dest="tune", action="store_false", default=False,
                       help="without --trainable: the given (or default) l2/temperature "
                            "(the default)")
        p.add_argument("--full-selection", action="store_true",
                       help="without --trainable: score every lexical model under every "
                            "analysis (default: the analyses only on the winner of the "
                            "unstemmed models, about half the inner-CV fits)")
        p.add_argument("--no-calibration", dest="calibrate", action="store_false",
                       help="without --trainable: leave out the relevance calibration "
                            "(Platt scaling of the winner's out-of-fold scores, stored in "
                            "the config: retrieve(..., min_relevance=p))")
        p.add_argument("--tune-adapter", action="store_true",
                       help="without --trainable: when a model with the query adapter "
                            "wins, choose its rank and pull by another inner CV (default: "
                            "rank 16, pull 0.1 unless --adapter-rank/--adapter-l2 say)")
        p.add_argument("--no-context", dest="context", action="store_false",
                       help="without --trainable: leave the context-signal models out")
        p.add_argument("--adapter-rank", type=int_at_least(1), default=None,
                       help="rank of a fitted query adapter (default 16; with "
                            "--tune-adapter chosen by inner CV among 4 and 16)")
        p.add_argument("--adapter-l2", type=_float_above(0.0, False), default=None,
                       help="L2 pull of the adapter to the identity (default 0.1; with "
                            "--tune-adapter chosen by inner CV among 0.01, 0.1, 1)")
        p.add_argument("--l2", type=_float_above(0.0, False), default=None,
                       help="L2 pull to the defaults (default 0.01 when a model is "
                            "selected, unless --tune; with --trainable: chosen by inner CV)")
        p.add_argument("--temperature", type=_float_above(0.0, True), default=None,
                       help="softmax temperature (default 0.05 when a model is selected, "
                            "unless --tune; with --trainable: chosen by inner CV)")
        p.add_argument("--steps", type=int_at_least(0), default=400,
                       help="maximum optimisation steps of each fit (default 400)")

    p_fit = sub.add_parser("fit", help="fit on the whole dataset, write a config")
    common(p_fit)
    fitting(p_fit)
    p_fit.add_argument("--out", required=True, help="where to write the fitted config JSON")
    p_fit.add_argument("--plot", default=None, help="directory for PNG plots")
    tune_embedder.add_arguments(p_fit)
    p_fit.set_defaults(func=cmd_fit)

    p_cv = sub.add_parser("cv", help="scenario-grouped k-fold cross-validation")
    common(p_cv)
    fitting(p_cv)
    p_cv.add_argument("--folds", type=int_at_least(2), default=5,
                      help="outer folds (2 to the number of scenarios with queries)")
    p_cv.add_argument("--seed", type=int_at_least(0), default=0,
                      help="fold assignment seed (>= 0)")
    p_cv.add_argument("--jobs", type=int_at_least(1), default=None,
                      help="folds fitted at once, one process each (default: one per CPU "
                      "core and 4 GiB of free memory, at most one per fold); the result "
                      "does not depend on it")
    tune_embedder.add_arguments(p_cv)
    p_cv.set_defaults(func=cmd_cv)

    p_ev = sub.add_parser("evaluate", help="replay through the engine with a config")
    common(p_ev, config="the EmotionalMemoryConfig JSON evaluated (default: the "
                        "library's defaults)")
    p_ev.set_defaults(func=cmd_evaluate)

    from training.affect import add_parser as add_affect
    from training.reembed import add_parser as add_reembed

    add_affect(sub)
    add_reembed(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI.

    Args:
        argv: Command-line arguments without the program name (default: ``sys.argv``).

    Returns:
        The exit status: the handler's (0), or 2 after printing a ``ValueError``,
        ``TypeError``, ``KeyError``, ``OSError`` (a missing file, a directory) or
        ``ImportError`` (an optional package a config needs, naming its extra) to
        stderr.
    """
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError, KeyError, OSError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
