"""The surrogate models of Bayesian optimisation over a finite list of candidates (imported in the
background, once SMAC was found; docs/search.md says how each was chosen).

:class:`ForestModel` is SMAC's random forest. Every dimension of a :class:`SearchSpace` becomes a
hyperparameter over the indices of its values: ordinal when the values are numbers (sorted, so
their order carries information), categorical otherwise. The settings are those of SMAC's
hyperparameter-optimisation facade except: 10 trees, single-threaded, ``max_leaf_nodes`` unlimited
(SMAC passes 2^20, which makes scikit-learn allocate that many nodes per tree) and no ``log_y`` leaf
rewriting (the times are modelled on a log scale directly).

:class:`GaussianProcessModel` is scikit-learn's Gaussian process (scikit-learn comes with SMAC). With
a few dozen results it ranks candidates better than the forest, whose leaves split too few points;
its cost grows with the cube of the results, so the strategy hands over to the forest later (and
uses the forest for the few proposals made before a design's worth of results is in).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from ConfigSpace import CategoricalHyperparameter, ConfigurationSpace, OrdinalHyperparameter
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import ConstantKernel, Kernel, Matern, WhiteKernel
from smac.model.random_forest import RandomForest
from threadpoolctl import ThreadpoolController

from .space import SearchSpace

__all__ = ["ForestModel", "GaussianProcessModel"]

#: BLAS's own threads (one per core) would compete with the compile workers for the cores, and the
#: Gaussian process's matrices (a few hundred rows) are too small to gain from them
_BLAS = ThreadpoolController()


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


class GaussianProcessModel:
    """A Gaussian process of log time over the candidates' parameters.

    Numeric parameters are scaled to [0, 1] by the index of their value (``SearchSpace.steps``, as
    in the strategy's local penalty); a categorical parameter becomes one column per value (1/sqrt(2)
    for the value taken), so that two candidates that differ in it are 1 apart, as in the local
    penalty too. The kernel is a constant times a Matern
    5/2 plus white noise (the measurements are noisy). While there are fewer than
    ``isotropic_per_dim`` results per parameter, one length scale serves every column: so few points
    cannot tell the dimensions apart, and a length scale per column fit to them steers the search
    into whatever the first points happened to separate. After that each column has its own.

    Hyperparameters are fit by maximum likelihood (started from the last ones) when the results grew
    by ``reoptimise_growth`` since they were last fit, or the length scales change kind; in between,
    the process is conditioned on the new results with the kernel kept (one Cholesky factorisation,
    about 1-3 ms for 100-300 results), so that most refits cost little next to a compile. BLAS runs
    single-threaded here.
    """

    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int,
        isotropic_per_dim: float = 3.0,
        reoptimise_growth: float = 0.5,
    ) -> None:
        self.seed = seed
        self.isotropic_below = isotropic_per_dim * len(space.names)
        self.reoptimise_growth = reoptimise_growth
        points = np.asarray(space.points, dtype=int).reshape(len(space), len(space.names))
        columns = []
        for d, values in enumerate(space.values):
            if space.is_numeric(d):
                columns.append(points[:, d : d + 1] / space.steps(d))
            else:
                columns.append(np.eye(len(values))[points[:, d]] / math.sqrt(2))
        self.X = np.hstack(columns) if columns else np.zeros((len(space), 0))
        self._kernel: Kernel | None = None  # the last fit hyperparameters
        self._fit_on = 0  # how many results they were fit on
        self._isotropic = True
        self._gp: GaussianProcessRegressor | None = None

    def _initial_kernel(self, isotropic: bool) -> Kernel:
        scale = 0.5 if isotropic else np.full(self.X.shape[1], 0.5)
        matern = Matern(length_scale=scale, length_scale_bounds=(0.05, 20.0), nu=2.5)
        return ConstantKernel(1.0, (1e-3, 1e3)) * matern + WhiteKernel(1e-3, (1e-6, 1e-1))

    def fit(self, indices: Sequence[int], y: Sequence[float]) -> None:
        with _BLAS.limit(limits=1, user_api="blas"):
            self._fit(indices, y)

    def _fit(self, indices: Sequence[int], y: Sequence[float]) -> None:
        n = len(indices)
        isotropic = n < self.isotropic_below
        kind_changed = self._kernel is None or isotropic != self._isotropic
        if kind_changed or n >= (1 + self.reoptimise_growth) * self._fit_on:
            kernel = self._initial_kernel(isotropic) if kind_changed else self._kernel
            gp = GaussianProcessRegressor(kernel, normalize_y=True, random_state=self.seed)
        else:
            gp = GaussianProcessRegressor(self._kernel, normalize_y=True, optimizer=None)
        gp.fit(self.X[np.asarray(indices, dtype=int)], np.asarray(y, dtype=float))
        if gp.optimizer is not None:
            self._kernel, self._fit_on, self._isotropic = gp.kernel_, n, isotropic
        self._gp = gp

    def predict(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance at the candidates ``indices``."""
        assert self._gp is not None
        with _BLAS.limit(limits=1, user_api="blas"):
            mean, std = self._gp.predict(self.X[indices], return_std=True)
        return mean, np.square(std)
