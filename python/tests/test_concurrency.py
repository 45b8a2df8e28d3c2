"""Two writers that both read version n cannot both commit n+1 (docs/FORMAT.md "Concurrency"):
between two Table objects, between Python threads, and between threads and the CLI binary."""

import subprocess
import threading

import pytest

import tinydelta

ROW = b'{"id":1}\n'


def test_two_tables_one_wins(table_path):
    tinydelta.create(table_path, "id:int")
    a, b = tinydelta.Table(table_path), tinydelta.Table(table_path)
    n = a.version
    assert b.version == n
    assert a.append([{"id": 1}], expect_version=n) == n + 1
    with pytest.raises(tinydelta.ConcurrentWriteError) as e:
        b.append([{"id": 2}], expect_version=n)
    assert e.value.version == n + 1 and e.value.read_version == n
    assert b.read() == [{"id": 1}]


def test_threads_and_cli_race_for_one_version(table_path, cli_bin):
    t = tinydelta.create(table_path, "id:int")
    t.append([{"id": 0}])
    n = t.version
    threads_n, procs_n = 6, 4
    start = threading.Barrier(threads_n + 1)
    results = []

    def writer(i):
        mine = tinydelta.Table(table_path)
        start.wait()
        try:
            results.append(("py", mine.append([{"id": 100 + i}], expect_version=n)))
        except tinydelta.ConcurrentWriteError:
            results.append(("py", "conflict"))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(threads_n)]
    for th in threads:
        th.start()
    procs = [
        subprocess.Popen(
            [cli_bin, "-q", "append", str(table_path), "--expect-version", str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(procs_n)
    ]
    start.wait()
    for p in procs:
        p.stdin.write(ROW)
        p.stdin.close()
    for th in threads:
        th.join()
    codes = [p.wait() for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    py_wins = [r for _, r in results if r != "conflict"]
    cli_wins = [c for c in codes if c == 0]
    assert set(codes) <= {0, 3}, codes  # 3: the CLI's exit status for a conflict
    assert len(py_wins) + len(cli_wins) == 1, (results, codes)
    assert t.version == n + 1
    assert py_wins in ([], [n + 1])
