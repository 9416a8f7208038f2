#!/usr/bin/env python3
"""The CLI for scripts, through the real `cairn` and `cairnd`: `cairn stop`,
`-0`/`--null` output, `--json` errors with their codes, and the help, README,
man page and completion naming every option of every command."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402
import test_install as ti  # noqa: E402


def gone(pid):
    """No such process, or a zombie (stopped; only its parent's wait is left)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


class Stop(unittest.TestCase):
    def setUp(self):
        self.tmp = ct.make_tempdir(self)

    def test_stop_stops_the_daemon_and_waits_for_it(self):
        d = ct.Daemon(self, base=self.tmp)
        d.start()
        d.cli("add", "-n", "kept", "-", input=b"kept across the stop")
        p = d.cli("stop")
        self.assertEqual((p.stdout, p.stderr), (b"", b""))
        # It had stopped when stop returned: exited (status 0), socket gone.
        self.assertIsNotNone(d.proc.poll(), "cairnd still running after cairn stop")
        self.assertEqual(d.wait(), 0, d.log_tail())
        self.assertFalse(os.path.exists(d.socket_path))
        self.assertIn("a client asked for a shutdown: stopping", d.log_text())
        d.start()
        self.assertEqual(d.cli("get", "kept").stdout, b"kept across the stop")

    def test_stop_of_an_autostarted_daemon(self):
        sock = os.path.join(self.tmp, "run", "auto.sock")
        env = ct.cli_env({"CAIRN_DATA_DIR": os.path.join(self.tmp, "data"),
                          "CAIRND": ct.CAIRND})
        ct.run_cli("--socket", sock, "add", "-", input=b"x", autostart=True, env=env)
        p = ct.run_cli("--socket", sock, "--json", "stop", env=env)
        out = json.loads(p.stdout)
        self.assertTrue(out["stopped"])
        self.assertTrue(gone(out["pid"]), "cairnd %d still running" % out["pid"])
        self.assertFalse(os.path.exists(sock))

    def test_stop_with_no_daemon(self):
        sock = os.path.join(self.tmp, "none.sock")
        p = ct.run_cli("--socket", sock, "stop", check_exit=3, autostart=True)
        self.assertEqual(p.stderr.decode(), "cairn: stop: no cairnd is running on %s\n" % sock)
        self.assertFalse(os.path.exists(sock), "stop started a daemon")
        p = ct.run_cli("--socket", sock, "stop", "--json", check_exit=3)
        self.assertEqual(json.loads(p.stdout)["error"]["code"], "not_running")
        self.assertEqual(p.stderr, b"")


class Null(unittest.TestCase):
    NAMES = [b"dir/a name with spaces", b"dir/line\nbreak", b"dir/esc\x1b[31mred\ttab",
             b"dir/quote'\"$(x)"]

    def setUp(self):
        self.d = ct.Daemon(self)
        self.d.start()
        self.hashes = {}
        for i, name in enumerate(self.NAMES):
            content = b"content %d\n" % i
            p = self.d.cli("add", "-0", "-n", os.fsdecode(name), "-", input=content)
            self.assertEqual(p.stdout, ct.sha256_hex(content).encode() + b"\0")
            self.hashes[name] = ct.sha256_hex(content)
        self.unnamed = ct.sha256_hex(b"no name")
        self.d.cli("add", "-", input=b"no name")

    def cairn_cmd(self):
        return "%s --no-autostart --socket %s" % (ct.CAIRN, self.d.socket_path)

    def test_ls_null_lists_names_raw_and_xargs_gets_them(self):
        p = self.d.cli("ls", "-0")
        self.assertEqual(p.stdout, b"".join(n + b"\0" for n in sorted(self.NAMES))
                         + self.unnamed.encode() + b"\0")
        p = self.d.cli("ls", "--null", "dir")
        self.assertEqual(p.stdout.split(b"\0")[:-1], sorted(self.NAMES))
        p = subprocess.run(["sh", "-c", "%s ls -0 dir | xargs -0 -n1 %s get"
                            % (self.cairn_cmd(), self.cairn_cmd())],
                           capture_output=True, timeout=60 * ct.SLOW)
        self.assertEqual((p.returncode, p.stderr), (0, b""))
        self.assertEqual(p.stdout, b"".join(b"content %d\n" % self.NAMES.index(n)
                                            for n in sorted(self.NAMES)))
        p = self.d.cli("ls", "--docs", "-0")
        self.assertEqual(sorted(p.stdout.split(b"\0")[:-1]),
                         sorted(h.encode() for h in list(self.hashes.values()) + [self.unnamed]))
        # Without -0 a name with a newline still goes out as it is into a pipe.
        self.assertIn(b"dir/line\nbreak\n", self.d.cli("ls").stdout)

    def test_search_and_add_null_give_hashes(self):
        p = self.d.cli("search", "content", "-0")
        self.assertEqual(sorted(p.stdout.split(b"\0")[:-1]),
                         sorted(h.encode() for h in self.hashes.values()))
        f = os.path.join(self.d.base, "two words")
        with open(f, "wb") as out:
            out.write(b"from a file")
        p = self.d.cli("add", "--null", f, "-", input=b"from stdin")
        self.assertEqual(p.stdout, b"%s\0%s\0" % (ct.sha256_hex(b"from a file").encode(),
                                                   ct.sha256_hex(b"from stdin").encode()))

    def test_log_null_gives_the_refs_of_the_versions(self):
        name = self.NAMES[1]  # with a newline
        self.d.cli("add", "-n", os.fsdecode(name), "-", input=b"second version")
        p = self.d.cli("log", "-0", os.fsdecode(name))
        self.assertEqual(p.stdout, name + b"@{0}\0" + name + b"@{1}\0")
        refs = p.stdout.split(b"\0")[:-1]
        self.assertEqual(self.d.cli("get", os.fsdecode(refs[1])).stdout, b"content 1\n")
        self.assertEqual(self.d.cli("get", os.fsdecode(refs[0])).stdout, b"second version")

    def test_null_with_a_format_option_is_a_usage_error(self):
        for args in (["ls", "-0", "-l"], ["ls", "-0", "--json"], ["search", "-0", "--json", "x"],
                     ["add", "-0", "--json", "-"], ["log", "-0", "--json", "x"]):
            with self.subTest(args=args):
                p = self.d.cli(*args, check_exit=2, input=b"")
                self.assertIn(b"-0 prints names or hashes alone", p.stderr + p.stdout)


class JsonErrors(unittest.TestCase):
    def setUp(self):
        self.d = ct.Daemon(self)
        self.d.start()

    def error(self, *args, code, exit, input=None, socket=True, env=None, autostart=False):
        """The one JSON error line a failed --json command prints; stderr stays empty."""
        if socket:
            p = self.d.cli("--json", *args, check_exit=exit, input=input, env=env)
        else:
            p = ct.run_cli("--json", *args, check_exit=exit, input=input, env=env,
                           autostart=autostart)
        self.assertEqual(p.stderr, b"")
        lines = p.stdout.decode().splitlines()
        errors = [json.loads(ln) for ln in lines if '"ok":false' in ln]
        self.assertEqual(len(errors), 1, p.stdout)
        e = errors[0]
        self.assertIs(e["ok"], False)
        self.assertEqual(e["error"]["code"], code, e)
        self.assertTrue(e["error"]["message"], e)
        return e, lines

    def test_daemon_errors_carry_the_protocol_codes_and_the_ref(self):
        e, _ = self.error("get", "nosuch", code="not_found", exit=1)
        self.assertEqual(e["error"]["ref"], "nosuch")
        h = self.d.cli("add", "-n", "kept", "-", input=b"kept").stdout.split()[0].decode()
        e, lines = self.error("rm", "kept", "nosuch2", code="not_found", exit=1)
        self.assertEqual(e["error"]["ref"], "nosuch2")
        self.assertEqual(json.loads(lines[0])["deleted"], [h])  # the good ref still done
        e, _ = self.error("get", os.fsdecode(b"bad\xffutf8"), code="not_found", exit=1)
        self.assertEqual(e["error"]["ref"], "bad\ufffdutf8")
        e, _ = self.error("rm", "0" * 64, code="not_found", exit=1)
        self.assertEqual(e["error"]["ref"], "0" * 64)

    def test_client_errors_have_codes_of_their_own(self):
        self.error("get", code="usage", exit=2)
        self.error("ls", "--bogus", code="usage", exit=2)   # before --json was read
        self.error("nosuchcommand", code="usage", exit=2)
        self.error("--config", os.path.join(self.d.base, "missing.conf"), "ls",
                   code="config", exit=2)
        none = os.path.join(self.d.base, "nobody.sock")
        self.error("--socket", none, "ls", code="unreachable", exit=3, socket=False)
        env = ct.cli_env({"CAIRND": "/nonexistent/cairnd",
                          "CAIRN_DATA_DIR": os.path.join(self.d.base, "d2")})
        e, _ = self.error("--socket", none, "ls", code="unreachable", exit=3, socket=False,
                          env=env, autostart=True)
        self.assertIn("cannot start /nonexistent/cairnd", e["error"]["message"])
        self.error("add", self.d.base, code="io", exit=1)  # a directory without -r

    def test_errors_keep_the_order_of_the_paths(self):
        paths = []
        for name in ("one", "missing", "two", "a-dir", "three"):
            path = os.path.join(self.d.base, name)
            paths.append(path)
            if name == "a-dir":
                os.mkdir(path)
            elif name != "missing":
                with open(path, "wb") as f:
                    f.write(name.encode())
        p = self.d.cli("--json", "add", *paths, check_exit=1)
        lines = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
        self.assertEqual([ln.get("name") or ln["error"]["code"] for ln in lines],
                         [paths[0], "io", paths[2], "io", paths[4]], lines)
        self.assertIn("is a directory", lines[3]["error"]["message"])

    def test_without_json_errors_stay_text_on_stderr(self):
        p = self.d.cli("get", "nosuch", check_exit=1)
        self.assertEqual((p.stdout, p.stderr), (b"", b"cairn: nosuch: not found\n"))


class EveryOption(unittest.TestCase):
    """Each command's options, in its help (`cairn help CMD`), the overview
    (`cairn --help`), the README's synopsis or text, cairn(1), and the bash
    completion: one list, none left out anywhere."""
    COMPLETION = os.path.join(ct.REPO_ROOT, "completions", "cairn.bash")

    @classmethod
    def setUpClass(cls):
        if shutil.which("scdoc") is None:
            raise unittest.SkipTest("scdoc is not installed")
        with open(os.path.join(ct.REPO_ROOT, "man", "cairn.1.scd"), "rb") as f:
            roff = subprocess.run(["scdoc"], input=f.read(), capture_output=True,
                                  check=True).stdout.decode()
        cls.man = ti.roff_text(roff)
        cls.overview = ct.run_cli("--help").stdout.decode()
        cls.commands = ti.readme_commands()

    def help_options(self, command):
        """The options of `cairn help COMMAND`'s option lines, long and short."""
        text = ct.run_cli("help", command).stdout.decode()
        found = []
        for line in text.split("\n"):
            m = re.match(r"^ {2,6}((?:--?[A-Za-z0-9][\w-]*(?: [A-Z][\w=-]*)?,? ?)+)", line)
            if m:
                found += ti.options_in(m.group(1))
        return found, text

    def overview_block(self, command):
        """The overview's lines for `command`: its line and those indented below it."""
        lines, out = self.overview.split("\n"), []
        for i, line in enumerate(lines):
            if re.match(r"^  %s(?![\w-])" % re.escape(command), line):
                out.append(line)
                for more in lines[i + 1:]:
                    if not more.startswith("   "):
                        break
                    out.append(more)
                break
        self.assertTrue(out, "the overview lacks " + command)
        return " ".join(out)

    def bash_offers(self, command):
        script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _cairn; '
                  'printf "%s\\n" "${COMPREPLY[@]}"')
        p = subprocess.run(["bash", "-c", script, "bash", self.COMPLETION, "cairn", command, "-"],
                           capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, CAIRN_SOCKET="/nonexistent/cairnd.sock"))
        return set(p.stdout.split())

    def test_every_option_everywhere(self):
        readme = ti.readme_sections()["Commands"]
        missing = []
        for command, alias, synopsis in self.commands:
            listed = ti.options_in(synopsis)
            options, text = self.help_options(command)
            block = self.overview_block(command)
            offered = self.bash_offers(command)
            for o in listed:
                if not ti.has_word(text, o):
                    missing.append("cairn help %s lacks %s" % (command, o))
                if not ti.has_word(block, o):
                    missing.append("the overview lacks %s %s" % (command, o))
            for o in options:
                if not (ti.has_word(readme, o) or o in listed):
                    missing.append("README lacks %s %s" % (command, o))
                if not ti.has_word(self.man, o):
                    missing.append("cairn(1) lacks %s %s" % (command, o))
                if o not in ("-h", "--help") and o not in offered:
                    missing.append("bash completion lacks %s %s" % (command, o))
        self.assertFalse(missing, "\n" + "\n".join(sorted(set(missing))))

if __name__ == "__main__":
    ct.main()
