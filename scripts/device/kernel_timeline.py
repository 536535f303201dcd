#!/usr/bin/env python3
"""Where a decode step's GPU time goes, from a kernel trace (bench/cupti_kernel_trace.cc).

  kernel_timeline.py trace.csv [--marker embedding_kernel] [--skip 3] [--top 45] [--show-step N]
                              [--records N] [--kinds]

Steps run from one launch of the marker kernel (once per step) to the next. The steps with the
most common kernel count (the steady decode steps) are summed, skipping the first --skip:
  span     marker start to the next marker start (host turnaround included);
  busy     time any kernel or copy runs; idle = span - busy;
  own      a kernel's share of the busy time when overlapping kernels (a PDL launch waiting
           for its predecessor, a side branch) are charged to the one that started first;
  gap      idle time right before the kernel (a graph or launch boundary).
--show-step N lists step N kernel by kernel. --kinds lists the step kinds (records a step, how many,
median span): a batch's steps have more records than one row's, and --records N sums those instead
of the most common kind. Standard library only.
"""
import argparse
import collections
import csv
import statistics
import sys


def short_name(name, width):
    # "void tf::cuda::(anonymous namespace)::foo<4; 8>(Args)" -> "foo<4; 8>" (first template level kept).
    for junk in ("void ", "tf::cuda::", "(anonymous namespace)::"):
        name = name.replace(junk, "")
    out, depth = [], 0
    for ch in name:
        if ch == "(" and depth == 0:
            break
        if ch in "<(":
            depth += 1
            if depth > 1:
                continue
        elif ch in ">)":
            depth -= 1
            if depth > 0:
                continue
        elif depth > 1:
            continue
        out.append(ch)
    s = "".join(out).strip()
    return s if len(s) <= width else s[: width - 1] + "~"


def own_times(seg):
    """Busy time charged to the earliest-started running kernel, per record index; and the union."""
    events = []
    for i, (s, e, _, _) in enumerate(seg):
        events.append((s, 1, i))
        events.append((e, 0, i))
    events.sort()
    active, own, busy, last = {}, collections.Counter(), 0, None
    for t, kind, i in events:
        if active and last is not None and t > last:
            first = min(active, key=lambda j: (seg[j][0], j))
            own[first] += t - last
            busy += t - last
        if kind:
            active[i] = True
        else:
            active.pop(i, None)
        last = t
    return own, busy


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--marker", default="embedding_kernel")
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--top", type=int, default=45)
    ap.add_argument("--width", type=int, default=52)
    ap.add_argument("--show-step", type=int, default=None)
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--kinds", action="store_true")
    a = ap.parse_args()

    with open(a.trace) as f:
        rows = sorted((int(r["start_ns"]), int(r["end_ns"]), r["graph_id"], r["name"]) for r in csv.DictReader(f))
    marks = [i for i, r in enumerate(rows) if a.marker in r[3]]
    if len(marks) < 2:
        sys.exit(f"fewer than two '{a.marker}' launches in the trace")
    steps = [(rows[b][0] - rows[m][0], rows[m:b]) for m, b in zip(marks, marks[1:])]
    kinds = collections.Counter(len(seg) for _, seg in steps)
    if a.kinds:
        print(f"{'records':>8} {'steps':>6} {'median span us':>15}")
        for count, many in kinds.most_common():
            spans = [span for span, seg in steps if len(seg) == count]
            print(f"{count:>8} {many:>6} {statistics.median(spans) / 1e3:>15.1f}")
        return
    mode = a.records if a.records is not None else kinds.most_common(1)[0][0]
    use = [st for st in steps if len(st[1]) == mode][a.skip:]
    if not use:
        sys.exit("no steady steps")
    if a.show_step is not None:
        _, seg = use[min(a.show_step, len(use) - 1)]
        t0, prev_end = seg[0][0], seg[0][0]
        print(f"{'start us':>9} {'dur us':>7} {'gap us':>7} {'graph':>6}  kernel")
        for s, e, g, name in seg:
            print(f"{(s - t0) / 1e3:9.2f} {(e - s) / 1e3:7.2f} {(s - prev_end) / 1e3:7.2f} {g:>6}  {short_name(name, 100)}")
            prev_end = max(prev_end, e)
        return

    agg = collections.defaultdict(lambda: [0, 0, 0, 0])  # calls, own ns, duration ns, gap ns
    spans, busies = [], []
    for span, seg in use:
        own, busy = own_times(seg)
        spans.append(span)
        busies.append(busy)
        prev_end = None
        for i, (s, e, _, name) in enumerate(seg):
            b = agg[short_name(name, a.width)]
            b[0] += 1
            b[1] += own[i]
            b[2] += e - s
            if prev_end is not None:
                b[3] += max(0, s - prev_end)
            prev_end = e if prev_end is None else max(prev_end, e)
    n, span, busy = len(use), statistics.median(spans), statistics.median(busies)
    print(f"{len(steps)} steps, {n} steady ones summed ({mode} records each)")
    print(f"step span {span / 1e3:.1f} us = busy {busy / 1e3:.1f} us + idle {(span - busy) / 1e3:.1f} us "
          f"({(span - busy) / span * 100:.1f}%)")
    print(f"{'kernel':<{a.width}} {'calls':>6} {'own us':>8} {'share':>6} {'mean':>7} {'dur us':>8} {'gap us':>7}")
    for name, (calls, own, dur, gap) in sorted(agg.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"{name:<{a.width}} {calls / n:>6.1f} {own / n / 1e3:>8.1f} {own / n / span * 100:>5.1f}% "
              f"{own / calls / 1e3:>7.2f} {dur / n / 1e3:>8.1f} {gap / n / 1e3:>7.1f}")


if __name__ == "__main__":
    main()
