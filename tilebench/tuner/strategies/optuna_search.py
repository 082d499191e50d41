"""Model-based search with optuna: TPE over categorical choices, CMA-ES over each choice list's index.

Failed configs are told to optuna as failed trials. A config seen before (optuna proposes repeats in
small spaces) is answered from memory instead of measured again; a batch optuna cannot fill is filled
with unseen configs drawn at random (lazily: a large grid is never listed). The search ends when every
allowed config was seen or the budget runs out.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator
from typing import Any

import optuna  # here, so that get_strategy's lazy import says when optuna is missing

from tilebench.store import config_hash
from tilebench.tuner.strategies import Budget
from tilebench.tuner.strategies.random_sample import shuffled

SEED = 0


@dataclasses.dataclass
class OptunaStrategy:
    sampler: str  # "tpe" or "cmaes"
    seed: int = SEED

    @property
    def __name__(self) -> str:
        return self.sampler

    def _study(self) -> Any:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if self.sampler == "tpe":
            sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=8)
        else:
            sampler = optuna.samplers.CmaEsSampler(
                seed=self.seed, n_startup_trials=4, warn_independent_sampling=False
            )
        return optuna.create_study(direction="minimize", sampler=sampler)

    def _config(self, trial: Any, params: dict[str, list]) -> dict:
        config = {}
        for name, values in params.items():
            if self.sampler == "tpe":
                config[name] = trial.suggest_categorical(name, values)
            else:
                config[name] = values[trial.suggest_int(f"{name}_index", 0, len(values) - 1)]
        return config

    def _record(self, study: Any, params: dict[str, list], config: dict, value: float | None) -> None:
        """Tell the study about a config it did not propose (a random fill)."""
        distributions, trial_params = {}, {}
        for name, values in params.items():
            if self.sampler == "tpe":
                distributions[name] = optuna.distributions.CategoricalDistribution(values)
                trial_params[name] = config[name]
            else:
                distributions[f"{name}_index"] = optuna.distributions.IntDistribution(0, len(values) - 1)
                trial_params[f"{name}_index"] = values.index(config[name])
        state = optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL
        study.add_trial(
            optuna.trial.create_trial(
                params=trial_params, distributions=distributions, value=value, state=state
            )
        )

    def search(self, space: Any, evaluate: Any, budget: Budget) -> None:
        study = self._study()
        params = {name: list(values) for name, values in space.params.items()}
        seen: dict[str, float | None] = {}
        fill = shuffled(space, random.Random(self.seed))  # drawn lazily: a large grid is never listed
        while not budget.exhausted():
            trials, batch = self._propose(study, params, space, seen, budget.next_batch_size())
            batch += _unseen(fill, seen, batch, budget.next_batch_size() - len(batch))
            if not batch:
                return  # every allowed config was seen
            for index, (config, outcome) in enumerate(zip(batch, evaluate(batch))):
                ok = (
                    outcome.status == "ok"
                    and outcome.median_ms is not None
                    and math.isfinite(outcome.median_ms)
                )
                value = outcome.median_ms if ok else None
                seen[config_hash(config)] = value
                if index < len(trials):
                    state = optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL
                    study.tell(trials[index], value, state=state)
                else:
                    self._record(study, params, config, value)
            budget.done += len(batch)

    def _propose(
        self, study: Any, params: dict[str, list], space: Any, seen: dict[str, float | None], want: int
    ) -> tuple[list, list[dict]]:
        """Up to `want` new configs optuna proposes (with their trials); repeats and configs outside the
        space are told back at once, as failed or with the value seen."""
        admits = getattr(space, "admits", space.allows)
        trials: list = []
        batch: list[dict] = []
        for _ in range(4 * want):  # optuna repeats itself in small discrete spaces
            if len(batch) == want:
                break
            trial = study.ask()
            config = self._config(trial, params)
            key = config_hash(config)
            if key not in seen and all(config_hash(c) != key for c in batch) and admits(config):
                trials.append(trial)
                batch.append(config)
                continue
            value = seen.get(key)
            state = optuna.trial.TrialState.FAIL if value is None else optuna.trial.TrialState.COMPLETE
            study.tell(trial, value, state=state)
        return trials, batch


def _unseen(fill: Iterator[dict], seen: dict[str, float | None], batch: list[dict], count: int) -> list[dict]:
    """Up to `count` configs from `fill` neither seen nor in `batch` (a random fill of optuna's batch)."""
    chosen = {config_hash(c) for c in batch}
    found: list[dict] = []
    while len(found) < count:  # a config is drawn only when wanted: one drawn and dropped is never tried
        config = next(fill, None)
        if config is None:
            break
        key = config_hash(config)
        if key not in seen and key not in chosen:
            chosen.add(key)
            found.append(config)
    return found


def strategy(name: str) -> OptunaStrategy:
    return OptunaStrategy(name)
