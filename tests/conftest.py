import pytest

from tests.spawned import InProcessServer, ServerProcess

# Test modules (by module name) run against both backends: each of their tests runs twice,
# [sqlite] and [postgres], on a throwaway PostgreSQL server (tests/pg.py). Modules with their own
# ways (processes/test_multiprocess, processes/test_crash, clients/test_scripts,
# properties/test_state_machine, storage/test_postgres) are not here.
BOTH_BACKENDS = {
    "tests.rules.test_ask_parent",
    "tests.rules.test_boundaries",
    "tests.rules.test_budgets",
    "tests.rules.test_cross_process_notice",
    "tests.rules.test_delegation",
    "tests.rules.test_events_and_notices",
    "tests.rules.test_host_api",
    "tests.rules.test_host_api_details",
    "tests.rules.test_identity",
    "tests.rules.test_interrupt",
    "tests.rules.test_list_endings",
    "tests.rules.test_list_agents",
    "tests.rules.test_mcp_caller",
    "tests.rules.test_ownership",
    "tests.rules.test_parking",
    "tests.rules.test_quotas",
    "tests.rules.test_rebuild",
    "tests.rules.test_registry",
    "tests.rules.test_report",
    "tests.rules.test_send_message",
    "tests.rules.test_settlement",
    "tests.rules.test_side_paths",
    "tests.rules.test_stamps",
    "tests.rules.test_stats",
    "tests.rules.test_tasks",
    "tests.rules.test_tool_details",
    "tests.rules.test_two_processes",
    "tests.wire.test_ask_user",
    "tests.wire.test_scenarios",
}


def pytest_generate_tests(metafunc):
    both = metafunc.module.__name__ in BOTH_BACKENDS and not metafunc.definition.get_closest_marker(
        "sqlite_only"
    )
    if "backend" in metafunc.fixturenames and both:
        metafunc.parametrize("backend", ["sqlite", "postgres"], indirect=True)


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL server for the whole session (fails, never skips, without one)."""
    from tests.pg import shared_server, stop_shared_server

    yield shared_server()
    stop_shared_server()


@pytest.fixture(scope="session")
def pgbouncers(pg_server):
    """PgBouncer in front of the session's server, one per pooling mode asked for (`[mode]`)."""
    from tests.pgbouncer import PgBouncer

    class Bouncers(dict):
        def __missing__(self, mode):
            self[mode] = bouncer = PgBouncer(pg_server, mode)
            return bouncer

    bouncers = Bouncers()
    yield bouncers
    for bouncer in bouncers.values():
        bouncer.stop()


@pytest.fixture
def pg_stores(pg_server):
    """This test's PostgreSQL databases and stores (closed and dropped at the end)."""
    from tests.pg import PostgresStores

    stores = PostgresStores(pg_server)
    yield stores
    stores.close()


@pytest.fixture(autouse=True)
def backend(request):
    """The storage backend CoreHost, process() and InProcessServer build on: "sqlite", or
    "postgres" for the modules of BOTH_BACKENDS (parametrized there)."""
    name = getattr(request, "param", "sqlite")
    if name == "sqlite":
        yield name
        return
    from tests import core_host

    stores = request.getfixturevalue("pg_stores")
    core_host.make_store = stores
    try:
        yield name
    finally:
        core_host.make_store = core_host.sqlite_store


@pytest.fixture
def server():
    """The real server in-process over pipes, initialized."""
    srv = InProcessServer()
    srv.host.initialize()
    yield srv
    srv.stop()


@pytest.fixture
def host(server):
    return server.host


@pytest.fixture
def make_server():
    """Factory for in-process servers with settings; all are stopped at the end."""
    made = []

    def make(initialize: bool = True, **settings):
        srv = InProcessServer(**settings)
        if initialize:
            srv.host.initialize()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        srv.stop()


@pytest.fixture
def spawn_process():
    """Factory for `python -m subagentd` subprocesses; all are stopped at the end."""
    made = []

    def spawn(*args, **kwargs):
        proc = ServerProcess(*args, **kwargs)
        made.append(proc)
        return proc

    yield spawn
    for proc in made:
        proc.stop()
