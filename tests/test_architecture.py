"""Architecture: core never imports adapters/bot, adapters never import core.store, and no project import cycles."""

from __future__ import annotations

import ast
import re
from collections import deque
from collections.abc import Collection
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "adapters", "bot")

Import = tuple[str, int]  # (absolute dotted name as written, line number)


@cache
def project_files() -> dict[str, Path]:
    """Every project module (each .py under core/, adapters/, bot/) by dotted name; `pkg/__init__.py` is `pkg`."""
    files: dict[str, Path] = {}
    for path in sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("*.py") if "__pycache__" not in p.parts):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def imports_in_source(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import anywhere in the tree (TYPE_CHECKING blocks, function bodies), made absolute.

    `from x.y import z` yields `x.y.z`; `resolve` trims it to `x.y` when `z` is not a module.
    """
    package = module if is_package else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: max(0, len(parts) - (node.level - 1))])
                base = f"{anchor}.{base}" if base else anchor
            found += [(base if alias.name == "*" else f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def resolve(name: str, modules: Collection[str]) -> str | None:
    """The project module an imported name lands in: the name itself, else its parent (a name from a module)."""
    parent = name.rpartition(".")[0]
    return name if name in modules else parent if parent in modules else None


@cache
def project_imports() -> dict[str, list[Import]]:
    """Importer module -> every import it makes."""
    return {
        module: imports_in_source(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")
        for module, path in project_files().items()
    }


def import_graph() -> dict[str, set[str]]:
    """Explicit edges between project modules only (no implicit edge to a submodule's parent package)."""
    modules = project_files()
    return {
        importer: {target for name, _ in imports if (target := resolve(name, modules))}
        for importer, imports in project_imports().items()
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest ring start -> ... (back to start) inside one component, breadth-first."""
    parents: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & within):
            if nxt == start:
                ring = [node]
                while ring[-1] != start:
                    ring.append(parents[ring[-1]])
                return ring[::-1]
            if nxt not in parents:
                parents[nxt] = node
                queue.append(nxt)
    return []


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """The shortest cycle through each module that is in one, deduplicated, as `a.b -> c.d -> a.b`."""
    rings: dict[tuple[str, ...], None] = {}
    for component in strongly_connected(graph):
        if len(component) > 1 or component[0] in graph[component[0]]:
            for member in component:
                ring = shortest_cycle(graph, member, set(component))
                first = ring.index(min(ring))
                rings[tuple(ring[first:] + ring[:first])] = None
    return [" -> ".join([*ring, ring[0]]) for ring in rings]


def crossings(layer: str, forbidden: tuple[str, ...]) -> list[str]:
    """`importer -> imported (file:line)` for each import from `layer` into a forbidden module or package."""
    modules = project_files()
    found: dict[str, None] = {}  # ordered and deduplicated (one line may import two names)
    for importer, imports in sorted(project_imports().items()):
        for name, line in sorted(imports, key=lambda item: item[1]):
            if importer.split(".")[0] == layer and any(name == f or name.startswith(f"{f}.") for f in forbidden):
                where = f"{modules[importer].relative_to(ROOT)}:{line}"
                found[f"{importer} -> {resolve(name, modules) or name} ({where})"] = None
    return list(found)


def test_core_never_imports_adapters_or_bot() -> None:
    offenders = crossings("core", ("adapters", "bot"))
    assert not offenders, "core must not import adapters or bot:\n  " + "\n  ".join(offenders)


def test_adapters_never_import_the_store() -> None:
    offenders = crossings("adapters", ("core.store",))
    assert not offenders, "adapters must not import core.store:\n  " + "\n  ".join(offenders)


# What an adapter may ask of the engine: the façade and its services. Storage comes as core/ports.py interfaces.
ENGINE_FACADE = frozenset({"ask", "answer", "channel", "approvals", "runs", "channel_admin", "registry", "settings"})


def engine_reads(source: str) -> list[tuple[str, int]]:
    """Each `engine.<name>` read in a module, through any holder (`engine`, `self._engine`, `answers.engine`)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            holder = node.value
            name = holder.id if isinstance(holder, ast.Name) else holder.attr if isinstance(holder, ast.Attribute) else ""
            if name in ("engine", "_engine"):
                found.append((node.attr, node.lineno))
    return found


def test_adapters_reach_the_engine_only_through_its_facade_and_get_storage_as_ports() -> None:
    """No adapter takes a store from the engine (it once handed out engine.feedback, a FeedbackStore); what an
    adapter is given of storage, AdapterPorts, is typed with core/ports.py's interfaces only."""
    import typing

    from adapters.base import AdapterPorts

    offenders = [
        f"{path.relative_to(ROOT)}:{line} engine.{name}"
        for module, path in project_files().items() if module.startswith("adapters")
        for name, line in engine_reads(path.read_text(encoding="utf-8")) if name not in ENGINE_FACADE
    ]
    assert not offenders, "adapters use the engine beyond its façade:\n  " + "\n  ".join(offenders)
    kinds = {field: hint.__module__ for field, hint in typing.get_type_hints(AdapterPorts).items()}
    # Storage as core/ports.py's small interfaces; learning from channels as its own port (the engine's service).
    assert kinds and all(module in ("core.ports", "core.learning.ports") for module in kinds.values()), kinds


def test_the_engine_reader_sees_every_holder() -> None:
    source = "engine.ask(r)\nself._engine.feedback.vote()\nx = self._answers.engine.approvals\n"
    assert sorted(engine_reads(source)) == [("approvals", 3), ("ask", 1), ("feedback", 2)]


def test_both_platforms_name_the_same_parts_the_same_way() -> None:
    """`/ask` is each platform's commands.py (SlackCommands, DiscordCommands); who may ask is its inbound.py's
    <Platform>Access; its call budgets are <Platform>Budgets (once DirectMessageRule and ChannelBudgets on Discord)."""
    classes: dict[str, set[str]] = {}
    for module, path in project_files().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes[module] = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    for platform, name in (("slack", "Slack"), ("discord", "Discord")):
        assert f"{name}Commands" in classes[f"adapters.{platform}.commands"], platform
        assert f"{name}Access" in classes[f"adapters.{platform}.inbound"], platform
        assert any(f"{name}Budgets" in found for module, found in classes.items() if module.startswith(f"adapters.{platform}.")), platform


def test_the_engine_builds_none_of_its_parts() -> None:
    """Engine.__init__ keeps what bot/engine_parts.py hands it (EngineParts) and calls nothing: core builds no store
    or service for itself."""
    tree = ast.parse((ROOT / "core" / "engine.py").read_text(encoding="utf-8"))
    [engine] = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Engine"]
    [init] = [node for node in engine.body if isinstance(node, ast.FunctionDef) and node.name == "__init__"]
    calls = [ast.unparse(node.func) for node in ast.walk(init) if isinstance(node, ast.Call)]
    assert not calls, f"Engine.__init__ builds {calls}"


def test_the_top_level_migrations_package_is_data_that_only_the_store_reads() -> None:
    """migrations/ holds the numbered SQL files and a docstring-only __init__.py; core/store/migrations.py reads
    it with importlib.resources, and no adapter or bot module imports it."""
    from core.store.migrations import MIGRATION_FILE

    folder = ROOT / "migrations"
    names = sorted(p.name for p in folder.iterdir() if p.name != "__pycache__")
    assert not [n for n in names if n != "__init__.py" and not MIGRATION_FILE.match(n)], names
    body = ast.parse((folder / "__init__.py").read_text(encoding="utf-8")).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), body
    offenders = crossings("adapters", ("migrations",)) + crossings("bot", ("migrations",))
    assert not offenders, "only core/store reads the migrations package:\n  " + "\n  ".join(offenders)
    assert 'files("migrations")' in (ROOT / "core" / "store" / "migrations.py").read_text(encoding="utf-8")


def test_the_maps_event_table_lists_every_event_of_the_union() -> None:
    """docs/ARCHITECTURE.md's event contract names each event of core/events.py: the union's members and the
    events core/events.py derives from them (Stopped is a Failed)."""
    import inspect
    import re
    import typing

    from core import events

    members = set(typing.get_args(events.Event))
    derived = {cls for _, cls in inspect.getmembers(events, inspect.isclass)
               if cls.__module__ == events.__name__ and any(issubclass(cls, m) and cls is not m for m in members)}
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    contract = text.split("## The event contract", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)\(", contract, re.MULTILINE))
    missing = sorted(cls.__name__ for cls in members | derived if cls.__name__ not in listed)
    assert not missing, f"events missing from the map's event table: {missing}"


def test_project_modules_have_no_import_cycles() -> None:
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles among project modules:\n  " + "\n  ".join(cycles)


def test_the_import_walker_sees_type_checking_and_function_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from core.store.db import Database\n"
        "def f() -> None:\n    import adapters.slack.rendering\n"
        "from . import rendering\nfrom .answer import X\nfrom ..streaming import *\n"
    )
    relative = {"adapters.discord.rendering", "adapters.discord.answer.X", "adapters.streaming"}
    in_module = {name for name, _ in imports_in_source(source, "adapters.discord.handlers")}
    assert {"core.store.db.Database", "adapters.slack.rendering"} | relative <= in_module
    assert relative <= {name for name, _ in imports_in_source(source, "adapters.discord", is_package=True)}
    assert imports_in_source("from . import x\n", "pkg.sub", is_package=True) == [("pkg.sub.x", 1)]
    assert imports_in_source("from . import x\n", "pkg.sub") == [("pkg.x", 1)]
    assert resolve("core.store.db.Database", {"core.store", "core.store.db"}) == "core.store.db"
    assert resolve("core.store.missing.Name", {"core.store", "core.store.db"}) is None
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": set()}) == ["a -> b -> c -> a", "d -> d"]


def test_the_architecture_map_lists_every_module() -> None:
    """docs/ARCHITECTURE.md's layout names each module file, and no file that is gone."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    layout = text.split("<!-- layout:start -->", 1)[1].split("<!-- layout:end -->", 1)[0]
    listed = {line.split()[0] for line in layout.splitlines() if line.strip().endswith(".py") or ".py " in line}
    listed = {entry for entry in listed if entry.endswith(".py")}
    files = {p.relative_to(ROOT).as_posix() for p in project_files().values() if p.name != "__init__.py"}
    assert not files - listed, f"modules missing from docs/ARCHITECTURE.md: {sorted(files - listed)}"
    assert not listed - files, f"docs/ARCHITECTURE.md lists modules that do not exist: {sorted(listed - files)}"


# One door per platform: only transport modules call a Slack or Discord client (the runtime half is
# tests/support/platform_door.py). discord.py's messaging methods, by name; checked in modules that import discord.
DISCORD_MESSAGING = frozenset({
    "send", "edit", "delete", "reply", "fetch_message", "history", "create_thread", "add_reaction", "remove_reaction",
    "clear_reactions", "pin", "unpin", "typing", "trigger_typing", "send_message", "edit_message", "defer",
    "send_modal", "original_response", "edit_original_response", "delete_original_response", "fetch_channel",
    "create_dm", "publish", "sync", "bulk_upsert_global_commands", "bulk_upsert_guild_commands",
})
DISCORD_MESSAGING_OWNERS = frozenset({"followup", "response"})  # interaction.followup.send, interaction.response.x
# Lifecycle calls outside a transport on purpose: auth.test at start, for readiness and for `relaybot doctor`.
DOOR_ALLOWED = frozenset({("adapters/slack/adapter.py", "auth_test")})


def platform_calls(path: Path, source: str) -> list[str]:
    """`file:line name` for each call of a Slack client method (or api_call) anywhere, and of a discord.py messaging
    method in a module that imports discord, outside the transport modules."""
    from slack_sdk.web.async_client import AsyncWebClient

    from tests.support.platform_door import is_transport

    relative = path.relative_to(ROOT).as_posix() if path.is_absolute() else path.as_posix()
    if is_transport(relative):
        return []
    slack_methods = {name for name in vars(AsyncWebClient) if not name.startswith("_")} | {"api_call"}
    tree = ast.parse(source)
    uses_discord = any(
        (isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "discord" for alias in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "discord")
        for node in ast.walk(tree)
    )
    # discord.py's history() is iterated, never awaited: an awaited .history( is something else (an audit log).
    awaited = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Await)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        # interaction.response.x / interaction.followup.x: the owner is an attribute, not a plain name.
        owner_name = owner.attr if isinstance(owner, ast.Attribute) else ""
        slack = name in slack_methods and (relative, name) not in DOOR_ALLOWED
        # `transport.edit(…)` / `self._transport.edit(…)`: our own MessageTransport, whose body is the door.
        ours = (owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")).endswith("transport")
        messaging = name in DISCORD_MESSAGING and not ours and not (name == "history" and id(node) in awaited)
        discord = uses_discord and (messaging or owner_name in DISCORD_MESSAGING_OWNERS)
        if slack or discord:
            found.append((node.lineno, f"{relative}:{node.lineno} {name}"))
    return [call for _, call in sorted(found)]


def test_only_the_transport_modules_call_the_platform_clients() -> None:
    offenders = [
        call for path in project_files().values() for call in platform_calls(path, path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "platform client calls outside the transport modules:\n  " + "\n  ".join(offenders)


def test_the_door_check_sees_slack_and_discord_calls_outside_a_transport() -> None:
    slack = "async def f(client):\n    await client.chat_postMessage(channel='C', text='x')\n"
    discord = "import discord\nasync def f(channel, interaction, admin):\n    await channel.send('x')\n" \
              "    await interaction.response.send_message('y')\n    await interaction.followup.send('z')\n" \
              "    await admin.history('key')\n    async for m in channel.history(limit=5):\n        pass\n"
    assert platform_calls(Path("adapters/slack/surface.py"), slack) == ["adapters/slack/surface.py:2 chat_postMessage"]
    assert platform_calls(Path("adapters/slack/transport.py"), slack) == []
    assert [c.rsplit(" ", 1)[1] for c in platform_calls(Path("adapters/discord/clicks.py"), discord)] == [
        "send", "send_message", "send", "history"]
    assert platform_calls(Path("adapters/discord/transport_http.py"), discord) == []
    assert platform_calls(Path("adapters/slack/adapter.py"), "async def f(c):\n    await c.auth_test()\n") == []


# The modules that serve every platform by iterating bot/platforms.py's PLATFORMS (issue 23): a platform is a
# folder and one table entry, so none of them may name one.
PLATFORM_BLIND = ("bot/runtime.py", "bot/doctor.py", "bot/channels_cli.py", "core/channels.py")
PLATFORM_NAME = re.compile(r"slack|discord", re.IGNORECASE)


def platform_names(source: str) -> list[str]:
    """`line: text` for each line that names a platform (in code, a string or a comment alike)."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(source.splitlines(), 1) if PLATFORM_NAME.search(line)]


def test_the_runtime_doctor_channels_cli_and_channel_settings_name_no_platform() -> None:
    offenders = [
        f"{path}:{line}" for path in PLATFORM_BLIND for line in platform_names((ROOT / path).read_text(encoding="utf-8"))
    ]
    assert not offenders, "these iterate PLATFORMS and must name no platform:\n  " + "\n  ".join(offenders)


def test_the_platform_name_check_sees_code_strings_and_comments() -> None:
    source = 'import x\nif settings.slack_bot_token:\n    pass\nlog("no DISCORD_TOKEN")\n# Slack only\nok = 1\n'
    assert [line.split(":")[0] for line in platform_names(source)] == ["2", "4", "5"]


# A module has one job and a function one step: past these, split by job (issue 23). tests/ and bench/ are exempt.
MODULE_MAX_LINES = 400
FUNCTION_MAX_LINES = 60
SIZED = ("adapters", "bot", "core")


def _oversized(root: Path) -> tuple[list[str], list[str]]:
    modules, functions = [], []
    for package in SIZED:
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            name = path.relative_to(root).as_posix()
            lines = source.count("\n") + (0 if source.endswith("\n") else 1)
            if lines > MODULE_MAX_LINES:
                modules.append(f"{name}: {lines} lines")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > FUNCTION_MAX_LINES:
                        functions.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return modules, functions


def test_every_module_and_function_is_within_its_size() -> None:
    modules, functions = _oversized(ROOT)
    assert not modules, f"modules over {MODULE_MAX_LINES} lines (split them by job): {modules}"
    assert not functions, f"functions over {FUNCTION_MAX_LINES} lines (split them into steps): {functions}"


def test_the_size_check_sees_a_long_module_and_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(FUNCTION_MAX_LINES))
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "long.py").write_text(f"def step():\n{body}\n" + "\n" * MODULE_MAX_LINES, encoding="utf-8")
    modules, functions = _oversized(tmp_path)
    assert modules == [f"core/long.py: {FUNCTION_MAX_LINES + 1 + MODULE_MAX_LINES} lines"]
    assert functions == [f"core/long.py:1 step: {FUNCTION_MAX_LINES + 1} lines"]
