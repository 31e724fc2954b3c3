r"""Synthetic sets in which a few vectors carry the class and the rest are distractors.

After the synthetic study of "Robust Noise Attenuation via Adaptive Pooling of Transformer Outputs" (Brothers,
2025, ICML, arXiv:2506.09215): a pooler sees a set of ``N`` vectors of which only ``k`` (the signal) hold what the
task needs, and the paper's signal-to-noise ratio is the share of signal vectors, :math:`\mathrm{SNR} = k / N`.
Mean pooling dilutes the signal by :math:`k / N` while the distractors' noise only shrinks by :math:`1/\sqrt{N}`,
so its accuracy collapses as the signal becomes rare; a learned attention pooler can find the signal vectors and
keep their centroid, the signal-optimal pool of the paper.

Here the task is classification. With :math:`\varepsilon \sim \mathcal{N}(0, I_D)`, a unit ``marker`` direction
:math:`u` and unit class prototypes :math:`p_c`, all orthonormal and fixed by ``task_seed``:

.. math::
    x_{\mathrm{noise}} = \varepsilon, \qquad
    x_{\mathrm{signal}} = \varepsilon + a\,(u + p_y)

with ``a = strength``. The class lives only in the signal vectors (along :math:`p_y`); the marker lets a pooler
tell signal from distractors without knowing the class. For two classes both limits are closed forms
(:func:`bayes_accuracy`): any classifier of the masked mean of a set of ``L`` real vectors reaches at most
:math:`\Phi(k a / \sqrt{2L})`, a classifier of the signal vectors' centroid :math:`\Phi(a \sqrt{k / 2})`.

Example:
    >>> from attnpool.synthetic import make_signal_sets, train_pooler_on_sets
    >>> train = make_signal_sets(2048, set_size=256, num_signal=1, dim=16, seed=1)  # 1 signal vector in 128-256
    >>> test = make_signal_sets(1024, set_size=256, num_signal=1, dim=16, seed=2)
    >>> fit = train_pooler_on_sets("attention", train, test, pooling_options={"attn_size": 16})
    >>> fit.accuracy, fit.signal_weight  # ~0.99 (mean pooling: ~0.57) and the attention weight on the signal

``benchmarks/snr.py`` sweeps poolers over signal fractions and set sizes with :func:`snr_sweep`.
"""

from attnpool.synthetic.fitting import PoolerFit, snr_sweep, train_pooler_on_sets
from attnpool.synthetic.sets import SignalSets, bayes_accuracy, make_signal_sets, task_directions

__all__ = [
    "PoolerFit",
    "SignalSets",
    "bayes_accuracy",
    "make_signal_sets",
    "snr_sweep",
    "task_directions",
    "train_pooler_on_sets",
]
