"""Draws the Grafana dashboard's panels as a PNG from a real run's Prometheus data (Grafana itself is
not needed): one webhook worker with Redis, the stub LLM and Bot API, Debian's Prometheus scraping it
with deploy/prometheus.yml, customers chatting for a while, then every dashboard query over the run.

    .venv/bin/python -m benchmarks.dashboard --out deploy/grafana/dashboard.png

Needs the `bench` extra (matplotlib) and Debian's prometheus package."""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from pathlib import Path

from tests.deploy.monitoring import Query, dashboard_queries, monitored_worker


async def collect(args: argparse.Namespace) -> tuple[float, dict[str, list[tuple[Query, list[tuple[float, float]]]]]]:
    async with monitored_worker(llm_latency=args.llm_latency) as run:
        started = time.time()
        await run.converse(chats=args.chats, messages=args.messages, think=args.think)
        await asyncio.sleep(3)  # a last scrape after the last turn
        ended = time.time()
        panels: dict[str, list[tuple[Query, list[tuple[float, float]]]]] = {}
        for query in dashboard_queries(args.rate_interval):
            data = await run.prometheus.api("query_range", query=query.expr, start=started, end=ended, step=2)
            for series in data["result"]:
                legend = query.legend.replace("{{outcome}}", series["metric"].get("outcome", ""))
                legend = legend.replace("{{call}}", series["metric"].get("call", ""))
                legend = legend.replace("{{instance}}", series["metric"].get("instance", ""))
                points = [(float(t) - started, float(v)) for t, v in series["values"] if not math.isnan(float(v))]
                panels.setdefault(query.panel, []).append((Query(query.panel, query.expr, legend), points))
        print(f"{run.sent} messages answered in {ended - started:.0f} s; {len(panels)} panels with data")
        return ended - started, panels


def draw(panels: dict[str, list[tuple[Query, list[tuple[float, float]]]]], seconds: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = list(dict.fromkeys(q.panel for q in dashboard_queries()))
    rows = math.ceil(len(titles) / 2)
    figure, axes = plt.subplots(rows, 2, figsize=(14, 3.2 * rows), squeeze=False)
    for index, title in enumerate(titles):
        axis = axes[index // 2][index % 2]
        for query, points in panels.get(title, []):
            if points:
                axis.plot([t for t, _ in points], [v for _, v in points], label=query.legend, linewidth=1.4)
        axis.set_title(title, fontsize=9)
        axis.set_xlim(0, seconds)
        axis.tick_params(labelsize=7)
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7, loc="upper left")
    for extra in range(len(titles), rows * 2):
        axes[extra // 2][extra % 2].axis("off")
    figure.supxlabel("seconds since the start of the run", fontsize=8)
    figure.suptitle("Support bot dashboard (deploy/grafana), drawn from Prometheus data of a real run", fontsize=11)
    figure.tight_layout()
    figure.savefig(out, dpi=80)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("dashboard.png"))
    parser.add_argument("--chats", type=int, default=6)
    parser.add_argument("--messages", type=int, default=14)
    parser.add_argument("--think", type=float, default=2.0, help="seconds a customer waits before the next message")
    parser.add_argument("--llm-latency", type=float, default=0.3)
    parser.add_argument("--rate-interval", default="20s", help="what Grafana's $__rate_interval stands for")
    args = parser.parse_args()
    seconds, panels = asyncio.run(collect(args))
    draw(panels, seconds, args.out)


if __name__ == "__main__":
    main()
