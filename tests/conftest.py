import pytest

from tests.spawned import InProcessServer, ServerProcess

# Test modules run against both backends: each of their tests runs twice,
# [sqlite] and [postgres], on a throwaway PostgreSQL server (tests/pg.py). Modules with their own
# ways (test_multiprocess, test_crash, test_scripts, test_state_machine, test_postgres) are not here.
BOTH_BACKENDS = {
    "test_rules_boundaries",
    "test_rules_budgets",
    "test_rules_delegation",
    "test_rules_engine_events",
    "test_rules_engine_paths",
    "test_rules_engine_processes",
    "test_rules_engine_rebuild",
    "test_rules_host_api",
    "test_rules_hostapi_details",
    "test_rules_identity",
    "test_rules_interrupt",
    "test_rules_list_agents",
    "test_rules_list_endings",
    "test_rules_mcp_caller",
    "test_rules_ownership",
    "test_rules_parking",
    "test_rules_quotas",
    "test_rules_registry",
    "test_rules_report",
    "test_rules_send_message",
    "test_rules_settlement",
    "test_rules_stamps",
    "test_rules_stats",
    "test_rules_tool_details",
    "test_scenarios",
    "test_cross_process_notice",
    "test_rules_tasks",
}


def pytest_generate_tests(metafunc):
    module = metafunc.module.__name__.rpartition(".")[2]
    both = module in BOTH_BACKENDS and not metafunc.definition.get_closest_marker("sqlite_only")
    if "backend" in metafunc.fixturenames and both:
        metafunc.parametrize("backend", ["sqlite", "postgres"], indirect=True)


@pytest.fixture(scope="session")
def pg_server():
    """One throwaway PostgreSQL server for the whole session (fails, never skips, without one)."""
    from tests.pg import shared_server, stop_shared_server

    yield shared_server()
    stop_shared_server()


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
