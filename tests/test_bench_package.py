"""The main job's package, ``fastenv.bench``: light to import, its old module paths still served for one release."""

import subprocess
import sys
import textwrap

import pytest


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, check=False)


def test_importing_the_bench_package_and_its_regimes_loads_no_torch():
    done = _run("""
        import sys
        import fastenv.bench, fastenv.bench.ablation, fastenv.bench.server, fastenv.bench.report, fastenv.bench.same_data
        print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("old", "names", "new"), [
    ("fastenv.bench_server", ["ServerConfig", "run", "ServerPolicy", "Trajectories", "Pinned"], "fastenv.bench.server"),
    ("fastenv.run_clock", ["Part", "RunClock"], "fastenv.bench.clock"),
    ("fastenv.policy", ["ChunkPolicy", "ExactChunkPolicy", "VLASizedTransformer"], "fastenv.bench.policies"),
])
def test_an_old_module_path_warns_naming_the_new_one_and_hands_on_the_same_objects(old, names, new):
    if old == "fastenv.policy":
        from helpers import need

        need("torch")
    done = _run(f"""
        import importlib, warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            old = importlib.import_module({old!r})
        said = [str(w.message) for w in seen if w.category is DeprecationWarning]
        assert said and {new!r} in said[0], said
        import fastenv.bench.placement, fastenv.bench.same_data, fastenv.bench.server_policy
        homes = [importlib.import_module(m) for m in ({new!r}, "fastenv.bench.placement", "fastenv.bench.same_data",
                                                        "fastenv.bench.server_policy")]
        for name in {names!r}:
            assert any(getattr(old, name) is getattr(home, name, None) for home in homes), name
        print("OK")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stderr[-2000:]


def test_the_packages_entry_points_stay_and_moved_names_warn():
    import fastenv.bench as bench
    from fastenv.bench import ablation, placement, report

    assert bench.run is ablation.run and bench.BenchConfig is ablation.BenchConfig and bench.format_table is report.ablation_table
    with pytest.warns(DeprecationWarning, match="fastenv.bench.placement.Pinned"):
        assert bench.Pinned is placement.Pinned
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        bench.nothing  # noqa: B018
