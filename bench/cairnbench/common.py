"""Helpers shared by the suites."""

import os

from . import charts, procs, report


def summarize(ms):
    """mean, median, p95 and count of a list of milliseconds."""
    return {"n": len(ms), "mean": report.mean(ms), "median": report.median(ms),
            "p95": report.percentile(ms, 95), "min": min(ms) if ms else None,
            "max": max(ms) if ms else None}


def search_support(daemon):
    """(True, None) when this build's cairn and cairnd both do search, else (False, why)."""
    r = procs.run_timed(daemon.cli("search", "availability"), capture=True)
    if r.returncode == 0:
        return True, None
    err = r.stderr.lower()
    if "unknown command" in err:
        return False, "search: not available in this build (the cairn CLI has no search command)"
    if "unknown op" in err or "unknown_op" in err:
        return False, "search: not available in this build (cairnd answers unknown_op)"
    if r.returncode < 0:
        raise procs.SuiteError("cairn search crashed (signal %d)" % -r.returncode)
    raise procs.SuiteError("cairn search failed: " + r.stderr.strip()[-300:])


def chart(result, ctx, name, draw, *args, **kwargs):
    """Draws one chart into the results directory; a failure is a note, not an error."""
    if not charts.available():
        result.note("charts: gnuplot is not installed, no SVG drawn")
        return
    path = os.path.join(ctx.out_dir, name)
    os.makedirs(ctx.out_dir, exist_ok=True)
    try:
        draw(path, *args, **kwargs)
    except (RuntimeError, OSError) as e:
        result.note("chart %s not drawn: %s" % (name, e))
        return
    if os.path.exists(path):
        result.charts.append(name)


def ms_cell(stats, key):
    return report.fmt(stats[key]) if stats and stats.get(key) is not None else "n/a"
