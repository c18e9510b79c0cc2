"""SMAC's random forest over a finite list of candidates (imported only once SMAC was found).

Every dimension of a :class:`SearchSpace` becomes a hyperparameter over the indices of its values:
ordinal when the values are numbers (sorted, so their order carries information), categorical
otherwise. The forest is SMAC's (``smac.model.random_forest.RandomForest``) with the settings of
SMAC's hyperparameter-optimisation facade except: 10 trees, single-threaded, ``max_leaf_nodes``
unlimited (SMAC passes 2^20, which makes scikit-learn allocate that many nodes per tree) and no
``log_y`` leaf rewriting (the times are modelled on a log scale directly).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ConfigSpace import CategoricalHyperparameter, ConfigurationSpace, OrdinalHyperparameter
from smac.model.random_forest import RandomForest

from .space import SearchSpace

__all__ = ["ForestModel"]


class ForestModel:
    """Fits SMAC's random forest on some candidates and predicts mean and variance for others."""

    def __init__(self, space: SearchSpace, *, n_trees: int, seed: int) -> None:
        self.space = space
        self.n_trees = n_trees
        self.seed = seed
        names = [f"x{d:04d}" for d in range(len(space.names))]
        self.configspace = ConfigurationSpace(seed=seed)
        self.configspace.add([self._hyperparameter(d, name) for d, name in enumerate(names)])
        column = [self.configspace.index_of[name] for name in names]
        points = np.asarray(space.points, dtype=float).reshape(len(space), len(names))
        self.X = np.empty_like(points)
        self.X[:, column] = points
        self._forest: RandomForest | None = None

    def _hyperparameter(self, dim: int, name: str) -> OrdinalHyperparameter | CategoricalHyperparameter:
        indices = list(range(len(self.space.values[dim])))
        if self.space.is_numeric(dim):
            return OrdinalHyperparameter(name, indices)
        return CategoricalHyperparameter(name, indices)

    def fit(self, indices: Sequence[int], y: Sequence[float]) -> None:
        forest = RandomForest(
            self.configspace,
            n_trees=self.n_trees,
            ratio_features=1.0,
            min_samples_split=2,
            min_samples_leaf=1,
            bootstrapping=True,
            log_y=False,
            max_leaf_nodes=None,  # an int makes scikit-learn pre-allocate that many nodes per tree
            n_jobs=1,
            seed=self.seed,
        )
        forest.train(self.X[np.asarray(indices, dtype=int)], np.asarray(y, dtype=float).reshape(-1, 1))
        self._forest = forest

    def predict(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance at the candidates ``indices``."""
        assert self._forest is not None
        mean, var = self._forest.predict_marginalized(self.X[indices])
        return mean[:, 0], np.maximum(var[:, 0], 0.0)
