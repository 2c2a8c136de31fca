"""Several processes: :func:`~vramnb.profile_distributed` and its per-rank report.

``_launch`` starts the ranks (``torch.multiprocessing.start_processes``), sets up each
one's process group and runs the user's step there under :func:`vramnb.profile_step`;
``_report`` is the pure report (:class:`DistributedReport`: one :class:`RankReport` per
rank, bytes and strings only), rendered by ``vramnb._render`` and plotted by ``vramnb._plot``.
"""
