"""vramnb's tests: a package, so that ``tests.conftest`` is one module whether pytest loads it
or a test imports its helpers (``from tests.conftest import run``), from a checkout or an
unpacked sdist."""
