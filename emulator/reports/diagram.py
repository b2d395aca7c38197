"""The cluster as a diagram (`render` writes cluster.dot, and cluster.svg when Graphviz is installed).

The job's Docker network encloses one box per instance group (its instance type and count, its hosts
algo-N in the group's colour, `emulator.reports.palette`); each input channel is a node outside it, with an
edge to every group whose hosts get the channel (labelled with its S3 distribution and input mode);
the group(s) the `distribution` applies to have a bold border and say the strategy and its launcher.
How the hosts talk is drawn too: for a distribution over MPI, an edge "mpirun over ssh" from the host
that runs `mpirun` to each other host it starts ranks on; for torch_distributed, a rendezvous node per
torchrun world (its MASTER_ADDR:MASTER_PORT) with an edge from every host of that world.

Built from the plan alone (pure): the same plan gives the same DOT text. Laying it out needs
Graphviz's `dot` program, which `write` runs when it is there.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import graphviz

from emulator.jobspec import hyperparameters
from emulator.jobspec.model import strategy_enabled
from emulator.planning.plan import Plan, mpi_hosts
from emulator.reports.palette import Colour, group_colours

DOT_FILE = "cluster.dot"
SVG_FILE = "cluster.svg"
FONT = "Helvetica,Arial,sans-serif"
INK = "#1f2328"
MUTED = "#5f6670"
# torchrun's rendezvous port on the world's first host: sagemaker_training/torch_distributed.py
# `MASTER_PORT = "7777"`, passed as --master_port when the world has more than one host.
TORCHRUN_PORT = 7777
# A one-host world gets no --master_addr/--master_port from the toolkit (torch_distributed.py
# `if num_hosts > 1: torchrun_cmd += multinode_options`): torchrun's own defaults, on the host itself.
TORCHRUN_LOCAL = "127.0.0.1:29500"


def _label(*lines: str, left: bool = False) -> str:
    """Lines as one DOT label: each line's backslashes kept as text (a group may be named `a\\nb`),
    joined by DOT's centred line break (`left`: left-justified ones). Always a quoted string, never
    an HTML-like label: the graphviz package writes a value in `<...>` unquoted, as HTML, unless it is
    marked `nohtml` (graphviz/quoting.py `quote`), and joining lines drops `escape`'s mark."""
    joined = "".join(graphviz.escape(line) + r"\l" for line in lines) if left else \
        r"\n".join(graphviz.escape(line) for line in lines)
    label: str = graphviz.nohtml(joined)
    return label


def launcher(plan: Plan) -> str:
    """How the toolkit starts the script on the distribution's hosts, for the diagram."""
    distribution = plan.spec.distribution
    if distribution is None:
        return ""
    if hyperparameters.launches_over_mpi(distribution):
        return "mpirun over SSH"
    return "torchrun" if distribution.strategy == "torch_distributed" else ""


def distribution_groups(plan: Plan) -> tuple[str, ...]:
    """The groups the distribution applies to: its instance_groups, every group when it names none;
    none when its strategy is not enabled (`mpi: {enabled: false}` distributes nothing)."""
    distribution = plan.spec.distribution
    if distribution is None:
        return ()
    block = distribution.options.get(distribution.strategy)
    # smdistributed enables its libraries one level down: {dataparallel: {enabled: true}}.
    nested = block.values() if distribution.strategy == "smdistributed" and isinstance(block, Mapping) else ()
    if not strategy_enabled(block) and not any(strategy_enabled(b) for b in nested):
        return ()
    return distribution.instance_groups or tuple(g.name for g in plan.groups)


def torchrun_worlds(plan: Plan) -> list[tuple[str, ...]]:
    """The hosts of each torchrun world, the first being MASTER_ADDR; none without torch_distributed.

    The toolkit's world is its `distribution_hosts` (sagemaker_training/environment.py): the hosts of
    `sagemaker_distribution_instance_groups` in resourceconfig.json's group order, or, when the SDK
    sends no such list, the host's own group (`get_distribution_instance_groups_from_resource_config`
    names the current group). The SDK sends it for torch_distributed only beside smdistributed
    (`hyperparameters.for_distribution`), so usually every group is a world of its own."""
    distribution = plan.spec.distribution
    if distribution is None or not strategy_enabled(distribution.options.get("torch_distributed")):
        return []
    named = hyperparameters.for_distribution(distribution, None).get("sagemaker_distribution_instance_groups")
    if isinstance(named, list):
        world = tuple(h for g in plan.groups if g.name in named for h in g.hosts)
        return [world] if world else []
    return [g.hosts for g in plan.groups if g.hosts]


def channel_groups(plan: Plan, channel: str) -> list[str]:
    """The groups (in spec order) whose hosts get `channel`, as planned."""
    return [g.name for g in plan.groups if any(channel in plan.host(h).channels for h in g.hosts)]


def graph(plan: Plan) -> graphviz.Digraph:
    """The diagram of a plan."""
    spec = plan.spec
    colours = group_colours([g.name for g in plan.groups])
    distributed = distribution_groups(plan)
    font = {"fontname": FONT, "fontcolor": INK}
    dot = graphviz.Digraph(
        "cluster",
        graph_attr={"rankdir": "LR", "compound": "true", "nodesep": "0.25", "ranksep": "0.9",
                    "labelloc": "t", "labeljust": "l", "fontsize": "16", "pad": "0.3",
                    "label": _label(f"job {plan.job_name}", f"image {plan.image}", left=True), **font},
        node_attr={"shape": "box", "style": "rounded,filled", "fillcolor": "white", "fontsize": "12",
                   "margin": "0.15,0.06", **font},
        edge_attr={"fontsize": "10", "color": MUTED, "arrowsize": "0.7", **font},
    )
    cluster_of: dict[str, tuple[str, str]] = {}  # group -> (its cluster's id, a host node inside it)
    with dot.subgraph(name="cluster_network") as network:
        isolated = " (isolated: no route out)" if plan.network_isolation else ""
        network.attr(label=_label(f"network {plan.network}{isolated}"), style="dashed,rounded", color=MUTED,
                     fontsize="12", margin="16")
        for index, group in enumerate(plan.groups):
            cluster = f"cluster_group_{index}"
            colour = colours[group.name]
            lines = [group.name, f"{group.instance_type} x {len(group.hosts)}"]
            bold = spec.distribution is not None and group.name in distributed
            if spec.distribution is not None and bold:
                how = launcher(plan)
                lines.append(f"distribution: {spec.distribution.strategy}" + (f" ({how})" if how else ""))
            with network.subgraph(name=cluster) as box:
                box.attr(label=_label(*lines), style="filled,rounded", fillcolor=colour.fill, color=colour.stroke,
                         penwidth="3.5" if bold else "1.2", fontsize="13", margin="12",
                         **({"fontname": f"{FONT.split(',')[0]}-Bold"} if bold else {}))
                for host in group.hosts:
                    box.node(f"host_{host}", _label(host, *_shares(plan, host)), color=colour.stroke)
                _rendezvous_nodes(plan, group.hosts, box)
            if group.hosts:
                cluster_of[group.name] = (cluster, f"host_{group.hosts[0]}")
        _rendezvous_nodes(plan, None, network)
    for index, (name, channel) in enumerate(spec.inputs.items()):
        node = f"channel_{index}"
        files = len(channel.files)
        dot.node(node, _label(f"channel {name}", channel.s3_data, f"{files} file" + ("" if files == 1 else "s")),
                 shape="cylinder", style="filled", fillcolor="#f3f4f6", color=MUTED)
        for group_name in channel_groups(plan, name):
            cluster, inside = cluster_of[group_name]
            dot.edge(node, inside, lhead=cluster,
                     label=_label(channel.distribution, spec.channel_mode(name)))
    _talk_edges(plan, dot, colours)
    return dot


def _rendezvous_node(index: int) -> str:
    return f"rendezvous_{index}"


def _rendezvous_nodes(plan: Plan, group_hosts: tuple[str, ...] | None, graph: graphviz.Digraph) -> None:
    """The rendezvous node of each torchrun world: inside the box of the group that holds the whole
    world (`group_hosts`), or in the network (None) for a world that spans groups."""
    for index, world in enumerate(torchrun_worlds(plan)):
        inside_one = any(set(world) <= set(g.hosts) for g in plan.groups)
        if (group_hosts is None and inside_one) or (group_hosts is not None and not set(world) <= set(group_hosts)):
            continue
        where = (f"{world[0]}:{TORCHRUN_PORT} (MASTER_ADDR:MASTER_PORT)" if len(world) > 1
                 else f"{TORCHRUN_LOCAL} on {world[0]} (a world of one)")
        graph.node(_rendezvous_node(index), _label("torchrun rendezvous", where),
                   shape="box", style="rounded,filled,dashed", fillcolor="white", color=INK, fontsize="10")


def _talk_edges(plan: Plan, dot: graphviz.Digraph, colours: Mapping[str, Colour]) -> None:
    """How the hosts talk: mpirun's ssh from its host to each other rank host, and every torchrun
    world's hosts to their rendezvous."""
    stroke = {h: colours[g.name].stroke for g in plan.groups for h in g.hosts}
    ranks = mpi_hosts(plan)
    # The toolkit's MasterRunner runs mpirun on the first of `distribution_hosts`, which starts orted
    # on the others over ssh (sagemaker_training/mpi.py `MasterRunner`, `WorkerRunner`).
    for host in ranks[1:]:
        dot.edge(f"host_{ranks[0]}", f"host_{host}", label="mpirun over ssh", color=stroke[ranks[0]],
                 fontcolor=stroke[ranks[0]], style="bold")
    for index, world in enumerate(torchrun_worlds(plan)):
        for host in world:
            dot.edge(f"host_{host}", _rendezvous_node(index), label="torchrun rendezvous", color=stroke[host],
                     fontcolor=stroke[host], style="dashed")


def _shares(plan: Plan, host: str) -> Iterable[str]:
    """A host's share of each ShardedByS3Key channel: its file count under the host's name."""
    for name, files in plan.host(host).shards.items():
        if plan.spec.inputs[name].distribution == "ShardedByS3Key":
            yield f"{name}: {len(files)} file" + ("" if len(files) == 1 else "s")
    for name, files in plan.host(host).pipes.items():
        if plan.spec.inputs[name].distribution == "ShardedByS3Key":
            yield f"{name}: {len(files)} file" + ("" if len(files) == 1 else "s") + " (pipe)"


def write(plan: Plan, out: Path) -> str | None:
    """Write out/cluster.dot, and out/cluster.svg when Graphviz's `dot` runs here. Returns why there
    is no SVG (one line with the way to get it), None when there is one."""
    diagram = graph(plan)
    (out / DOT_FILE).write_text(diagram.source)
    try:
        (out / SVG_FILE).write_bytes(diagram.pipe(format="svg"))
    except graphviz.ExecutableNotFound:
        return (f"{SVG_FILE} not drawn: Graphviz's `dot` is not installed (apt-get install graphviz); "
                f"{DOT_FILE} is there")
    except subprocess.CalledProcessError as err:
        detail = (err.stderr or b"").decode(errors="replace").strip().splitlines()
        return f"{SVG_FILE} not drawn: `dot` failed" + (f" ({detail[-1]})" if detail else "")
    return None
