"""Serving a blend of runs: ``attnpool serve --run A B`` answers what ``attnpool predict --run A B`` writes.

Each run is loaded as its own :class:`~attnpool.serving.service.Service` (its folds, tokenizer, text construction
and backend); a request's rows are tokenised by every run, each run scores them, and the scores are combined by the
same :class:`~attnpool.prediction.blend.RunBlend` as ``predict`` (classification: probabilities averaged; regression:
each run standardised by its own out-of-fold predictions). A row takes the fields of every run. Word weights
(``"weights": true``) are the first run's pooler's: the runs may not share a tokenizer, so their weights are not
averaged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnpool.data.prediction import context_views
from attnpool.prediction.blend import LONE_WEIGHTS, RunBlend, refuse_repeated_runs
from attnpool.runs.run import Run, RunError
from attnpool.serving.process import thread_settings_kept
from attnpool.serving.service import Answer, Job, Service, public_name

logger = logging.getLogger("attnpool.serve")


@dataclass
class BlendService(Service):
    """Several runs served as one: see the module docstring. Its facts (task, classes) are its first run's."""

    members: list[Service] = field(default_factory=list)
    blend: RunBlend | None = None

    @classmethod
    def load_blend(cls, sources: Sequence[str | Path], *, blend_weights: Sequence[float] | None = None,
                   **options: Any) -> BlendService:
        """Load every run with :meth:`Service.load`'s ``options`` and blend them as ``predict`` does.

        Raises:
            RunError: A source that is a model folder (a blend is standardised by each run's out-of-fold
                predictions), runs that cannot be blended (another task or classes), a chosen fold without its
                out-of-fold file; what :meth:`Service.load` raises.
            ValueError: Fewer than two sources, bad weights.
        """
        if len(sources) < 2:
            raise ValueError(f"a blend needs two or more runs, got {len(sources)}")
        refuse_repeated_runs(sources)
        for source in sources:
            if not Run.is_run(Path(source)):
                raise RunError(f"{source} is not a train run: a blend serves the --output-dir of attnpool train (each "
                               "run is standardised by its out-of-fold predictions); serve a model folder alone")
        # a context view applies to the runs trained with a group context; the others read their rows as trained
        view = options.pop("context_view", "with")
        has_context = [bool(Run.open(source).config().group_context) for source in sources]
        context_views(view, any(has_context), ", ".join(map(str, sources)))
        members = [Service.load(source, **options, context_view=view if context else "with")
                   for source, context in zip(sources, has_context, strict=True)]
        blend = RunBlend.read([Run.open(member.source) for member in members], [member.folds for member in members],
                              blend_weights)
        first = members[0]
        fields = list(dict.fromkeys(name for member in members for name in member.fields))
        id_field = first.id_field if first.id_field not in fields else None
        base = {f.name: getattr(first, f.name) for f in dataclasses.fields(Service) if f.init}
        base.update(kind="blend", fields=fields, id_field=id_field, context_view=view, _bare=None,
                    max_length=max(member.max_length for member in members),
                    encoder=", ".join(dict.fromkeys(member.encoder for member in members)))
        return cls(**base, members=members, blend=blend)

    @property
    def folds(self) -> list[int]:
        """The fold numbers of the runs' models (each run ensembles its own)."""
        return sorted({fold for member in self.members for fold in member.folds})

    def describe(self, *, public: bool = False) -> str:
        """What is served, in a few words (the start-up log; ``public``: for clients, without the server's paths)."""
        runs = ", ".join(public_name(m.source) if public else str(m.source) for m in self.members)
        return f"a blend of {len(self.members)} runs ({runs})"

    def info(self) -> dict[str, Any]:
        """:meth:`Service.info`, with each run of the blend (its folder's name), its folds and weight."""
        runs = [{"run": public_name(member.source), "folds": member.folds, "weight": float(weight),
                 "encoder": public_name(member.encoder), "pooler": member.pooler}
                for member, weight in zip(self.members, self.blend.weights, strict=True)]
        encoder = ", ".join(dict.fromkeys(run["encoder"] for run in runs))
        return {**super().info(), "encoder": encoder, "runs": runs}

    def encode(self, rows: Sequence[dict[str, str | None]], *, texts: bool = False) -> Job:
        """Every run's tokens of the rows (the word texts only for the first run, whose weights are served)."""
        parts = [member.encode(rows, texts=texts and i == 0) for i, member in enumerate(self.members)]
        return Job(parts[0].encodings, parts[0].texts, parts)

    def run(self, jobs: Sequence[Job], *, batch_size: int) -> list[Answer]:
        """Each run's answers to the jobs, blended; the words are the first run's."""
        answers = [member.run([job.parts[i] for job in jobs], batch_size=batch_size)
                   for i, member in enumerate(self.members)]
        return [Answer(self.blend.combine([run_answers[j].scores for run_answers in answers]), answers[0][j].words)
                for j in range(len(jobs))]

    def warm_up(self) -> None:
        """Every run's warm-up."""
        for member in self.members:
            member.warm_up()


@thread_settings_kept()  # a blend whose second run fails gives back what loading the first one set
def load_service(source: str | Path | Sequence[str | Path], *, blend_weights: Sequence[float] | None = None,
                 **options: Any) -> Service:
    """One run or model folder (:meth:`Service.load`), or a :class:`BlendService` of several runs.

    Raises:
        ValueError: ``blend_weights`` without several runs.
    """
    sources = [source] if isinstance(source, (str, Path)) else list(source)
    if len(sources) == 1:  # a list of one run is that run alone, as in predict()
        if blend_weights is not None:
            raise ValueError(LONE_WEIGHTS)
        return Service.load(sources[0], **options)
    return BlendService.load_blend(sources, blend_weights=blend_weights, **options)
