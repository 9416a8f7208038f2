#!/usr/bin/env python3
"""`meson install --destdir TMP --no-rebuild` of the build that $CAIRND
belongs to, and what it puts in TMP:

  Binaries     cairn and cairnd run (--version); nothing else lands in bin
               (no test programs, no benchmarks)
  ManPages     cairn(1), cairnd(8) and cairn.conf(5) are roff (.TH), `man -l`
               renders them, and each names what README.md's tables and
               command headings list: commands and their synopses, options,
               exit codes, error codes, query syntax, flags with their
               environment variables and defaults, config keys with their
               values, defaults and meaning, data directory files, backends.
               The README is the source of truth: a page that drifts from it
               fails here.
  Completions  bash, zsh and fish completions are where the shells look,
               parse (bash -n, zsh -n, fish --no-execute, for the shells
               installed), and offer every command and option of the README
"""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cairntest as ct  # noqa: E402

BUILD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(ct.CAIRND)))
README = os.path.join(ct.REPO_ROOT, "README.md")

# --------------------------------------------------------------------------
# README.md
# --------------------------------------------------------------------------


def plain(md):
    """Markdown cell text as a man page shows it: no backticks, one space."""
    return " ".join(md.replace("`", "").split())


def readme_sections():
    """{heading: text} for every ## and ### heading of the README."""
    sections, name = {}, ""
    with open(README, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"#{2,3} (.*)", line)
            if m:
                name = plain(m.group(1))
                sections[name] = ""
            else:
                sections[name] = sections.get(name, "") + line
    return sections


def tables(text):
    """[(header, rows)] of the Markdown tables in text: the first row's
    cells, and the other rows (lists of cells) but the separator."""
    found, rows = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if rows is None:
                rows = [cells]
            elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
                rows.append(cells)
        elif rows is not None:
            found.append((rows[0], rows[1:]))
            rows = None
    return found


def table(section, first_column):
    """The rows of the one table of a README section whose first column is
    headed first_column."""
    found = [rows for header, rows in tables(readme_sections()[section])
             if header[0] == first_column]
    assert len(found) == 1, "README section %r: no single table of %r" % (section, first_column)
    return found[0]


def readme_commands():
    """[(command, alias or None, synopsis without 'cairn ')] from the
    **`cairn COMMAND ...`** headings of the README."""
    text = readme_sections()["Commands"]
    found = []
    for m in re.finditer(r"^\*\*`cairn (([\w-]+)[^`]*)`\*\*(?: \(alias `([\w-]+)`\))?", text, re.M):
        found.append((m.group(2), m.group(3), plain(m.group(1))))
    assert len(found) >= 9, "found only %d command headings in README.md" % len(found)
    return found


def global_options():
    """The options of the README's table for `cairn`: --socket, -V, ..."""
    found = [o.split()[0] for cell, _ in table("The cairn command", "option")
             for o in plain(cell).split(", ")]
    assert {"--socket", "--json", "--help", "-V", "--version"} <= set(found), found
    return found


def options_in(synopsis):
    return re.findall(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)", synopsis)


# --------------------------------------------------------------------------
# roff
# --------------------------------------------------------------------------


def roff_text(src):
    """The words of a roff page, escapes and macros dropped, on one line."""
    out, in_table_format = [], False
    for line in src.splitlines():
        if line.startswith(".TS"):
            in_table_format = True
            continue
        if in_table_format:
            in_table_format = not line.rstrip().endswith(".")
            continue
        if line.startswith((".", "'")):
            m = re.match(r"\.(SH|SS) (.*)", line)
            if m:
                out.append(m.group(2).strip('"'))
            continue
        out.append(line)
    text = " ".join(out)
    text = re.sub(r"\\h'[^']*'|\\\(bu|\\c|\\f[BIRP]|\\&", "", text)
    text = text.replace("\\(aq", "'").replace("\\-", "-").replace("\\e", "\\")
    text = re.sub(r"(?<!\S)T[{}](?!\S)", " ", text)
    return " ".join(text.split())


def has_word(text, word):
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text) is not None


# --------------------------------------------------------------------------
# the install
# --------------------------------------------------------------------------


class Install(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(os.path.join(BUILD_DIR, "meson-private", "coredata.dat")):
            raise unittest.SkipTest("%s (from $CAIRND) is not a meson build directory" % BUILD_DIR)
        meson = shutil.which("meson")
        if meson is None:
            raise unittest.SkipTest("meson is not on PATH")
        cls.destdir = ct.make_tempdir(prefix="cairn-install-")
        cls.addClassCleanup(shutil.rmtree, cls.destdir, True)
        proc = subprocess.run([meson, "install", "--destdir", cls.destdir, "--no-rebuild",
                               "-C", BUILD_DIR], capture_output=True, text=True)
        if proc.returncode != 0:
            raise AssertionError("meson install failed (%d):\n%s%s"
                                 % (proc.returncode, proc.stdout, proc.stderr))
        opts = json.loads(subprocess.run([meson, "introspect", "--buildoptions", BUILD_DIR],
                                         capture_output=True, text=True, check=True).stdout)
        opts = {o["name"]: o["value"] for o in opts}
        for d in ("bindir", "mandir", "datadir"):  # relative to the prefix, or absolute
            setattr(cls, d, cls.destdir + os.path.join(opts["prefix"], opts[d]))

    def installed(self, path):
        self.assertTrue(os.path.isfile(path), "not installed: " + path)
        return path


class Binaries(Install):
    def test_binaries_run(self):
        for name in ("cairn", "cairnd"):
            with self.subTest(name):
                exe = self.installed(os.path.join(self.bindir, name))
                proc = subprocess.run([exe, "--version"], capture_output=True, text=True,
                                      timeout=30)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertRegex(proc.stdout, r"^%s \d+\.\d+\.\d+\n$" % name)

    def test_nothing_else_in_bin(self):
        self.assertEqual(sorted(os.listdir(self.bindir)), ["cairn", "cairnd"])

    def test_no_test_or_bench_program_installed(self):
        for dirpath, _, files in os.walk(self.destdir):
            for f in files:
                self.assertFalse(f.startswith("test-") or f in ("cairn-loadgen", "backend-bench"),
                                 os.path.join(dirpath, f))


class ManPages(Install):
    PAGES = [("cairn", "1"), ("cairnd", "8"), ("cairn.conf", "5")]

    def page(self, name, section):
        path = self.installed(os.path.join(self.mandir, "man" + section, name + "." + section))
        with open(path, encoding="utf-8") as f:
            return f.read()

    def text(self, name, section):
        return roff_text(self.page(name, section))

    def assert_says(self, text, phrase, page):
        phrase = plain(phrase)
        self.assertTrue(phrase.lower() in text.lower(), "%s does not say %r" % (page, phrase))

    def test_roff_header(self):
        for name, section in self.PAGES:
            with self.subTest(name):
                self.assertRegex(self.page(name, section),
                                 r'(?m)^\.TH "?%s"? "?%s"?' % (re.escape(name), section))

    def test_man_renders(self):
        if shutil.which("man") is None:
            self.skipTest("man is not installed")
        env = dict(os.environ, LC_ALL="C", MANWIDTH="100")
        env.pop("MAN_KEEP_FORMATTING", None)
        for name, section in self.PAGES:
            with self.subTest(name):
                path = os.path.join(self.mandir, "man" + section, name + "." + section)
                proc = subprocess.run(["man", "-l", path], capture_output=True, text=True,
                                      env=env, timeout=60)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(proc.stderr, "")
                for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
                    self.assertRegex(proc.stdout, r"(?m)^%s$" % heading)

    def test_cairn_page(self):
        text, page = self.text("cairn", "1"), "cairn(1)"
        for command, alias, synopsis in readme_commands():
            self.assert_says(text, synopsis, page)
            if alias:
                self.assert_says(text, "(alias %s)" % alias, page)
        for option, _ in table("The cairn command", "option"):
            for o in plain(option).split(", "):
                self.assert_says(text, o, page)
        for var in set(re.findall(r"\$([A-Z_]+)", readme_sections()["The cairn command"])):
            self.assertRegex(text, r"\$%s(?!\w)" % var)
        for syntax, meaning in table("Commands", "syntax"):  # the query language
            self.assert_says(text, syntax, page)
            self.assert_says(text, meaning, page)
        for row in table("Commands", "tool"):  # cairn mcp
            for cell in row:
                self.assert_says(text, cell, page)
        exit_codes = table("Exit codes and errors", "code")
        self.assertEqual([c for c, _ in exit_codes], ["0", "1", "2", "3"])
        for code, meaning in exit_codes:
            self.assertTrue(has_word(text, code))
            self.assert_says(text, meaning, page)
        error_codes = table("Protocol error codes", "code")
        self.assertGreaterEqual(len(error_codes), 13)
        for code, meaning in error_codes:
            self.assertTrue(has_word(text, plain(code)), code)
            self.assert_says(text, meaning, page)

    def test_cairnd_page(self):
        text, page = self.text("cairnd", "8"), "cairnd(8)"
        section = readme_sections()["The cairnd daemon"]
        synopsis = re.search(r"```\n(cairnd .*?)```", section, re.S).group(1)
        for line in synopsis.splitlines():
            self.assert_says(text, line, page)
        flags = table("The cairnd daemon", "flag")
        self.assertGreaterEqual(len(flags), 5)
        for flag, env, key, default in flags:
            self.assert_says(text, flag, page)
            if env:
                self.assertTrue(has_word(text, plain(env)), env)
            if key:
                sect, name = plain(key).split()
                self.assertIn(sect, text)
                self.assertTrue(has_word(text, name), name)
            self.assert_says(text, "Default: " + plain(default), page)
        for path, what in table("Data directory", "path"):
            self.assert_says(text, path, page)
            self.assert_says(text, what, page)
        backends = re.findall(r"\*\*`([^`]+)`\*\*", readme_sections()["Backends"])
        self.assertIn("sftp://USER@HOST[:PORT]/PATH", backends)
        for url in backends:
            self.assert_says(text, url, page)

    def test_conf_page(self):
        text, page = self.text("cairn.conf", "5"), "cairn.conf(5)"
        keys = table("Configuration file", "section")
        self.assertGreaterEqual(len(keys), 20)
        for sect, key, values, default, meaning in keys:
            with self.subTest(key=plain(key)):
                self.assert_says(text, "SECTION " + plain(sect), page)
                self.assert_says(text, "%s = %s" % (plain(key), plain(values)), page)
                if default != "see above":
                    self.assert_says(text, "Default: " + plain(default), page)
                self.assert_says(text, re.sub(r"^sftp: ", "", plain(meaning)), page)
        self.assert_says(text, "sftp://USER@HOST[:PORT]/PATH", page)


class Completions(Install):
    def paths(self):
        return {
            "bash": os.path.join(self.datadir, "bash-completion", "completions", "cairn"),
            "zsh": os.path.join(self.datadir, "zsh", "site-functions", "_cairn"),
            "fish": os.path.join(self.datadir, "fish", "vendor_completions.d", "cairn.fish"),
        }

    def cairnd_paths(self):
        return {
            "bash": os.path.join(self.datadir, "bash-completion", "completions", "cairnd"),
            "zsh": os.path.join(self.datadir, "zsh", "site-functions", "_cairnd"),
            "fish": os.path.join(self.datadir, "fish", "vendor_completions.d", "cairnd.fish"),
        }

    def expected(self):
        """{command: options} of the README, aliases included."""
        out = {}
        for command, alias, synopsis in readme_commands():
            for c in filter(None, (command, alias)):
                out[c] = options_in(synopsis)
        return out

    def test_installed_and_parse(self):
        checks = {"bash": ["bash", "-n"], "zsh": ["zsh", "-n"], "fish": ["fish", "--no-execute"]}
        for shell, path in list(self.paths().items()) + list(self.cairnd_paths().items()):
            with self.subTest(shell, path=path):
                self.installed(path)
                if shutil.which(shell) is None:
                    continue
                proc = subprocess.run(checks[shell] + [path], capture_output=True, text=True,
                                      timeout=60)
                self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_zsh_names_everything(self):
        with open(self.installed(self.paths()["zsh"]), encoding="utf-8") as f:
            src = f.read()
        self.assertTrue(src.startswith("#compdef cairn\n"))
        for command, options in self.expected().items():
            self.assertTrue("'%s:" % command in src, "_cairn lacks the command " + command)
            for o in options + global_options():
                self.assertTrue(re.search(r"['\"{,*)]%s[\[=,'}]" % re.escape(o), src),
                                "_cairn lacks the option %s of %s" % (o, command))

    def complete(self, shell, line):
        """Completions of `line` (ending where the cursor is) in shell."""
        path = self.paths()[shell]
        if shell == "bash":
            script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _cairn; '
                      'printf "%s\\n" "${COMPREPLY[@]}"')
            words = line.split(" ")
            argv = ["bash", "-c", script, "bash", path] + words
        else:
            argv = ["fish", "--no-config", "-c", 'source $argv[1]; complete -C $argv[2]',
                    path, line]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, CAIRN_SOCKET=os.path.join(self.destdir, "none")))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return {ln.split("\t")[0] for ln in proc.stdout.splitlines() if ln}

    def check_shell(self, shell):
        if shutil.which(shell) is None:
            self.skipTest(shell + " is not installed")
        cairn = os.path.join(self.bindir, "cairn")
        expected = self.expected()
        self.assertTrue(set(expected) <= self.complete(shell, cairn + " "))
        self.assertTrue(set(global_options()) <= self.complete(shell, cairn + " -"))
        for command, options in expected.items():
            with self.subTest(command=command):
                offered = self.complete(shell, "%s %s -" % (cairn, command))
                self.assertTrue(set(options + global_options()) <= offered,
                                sorted(set(options + global_options()) - offered))
        readme_dir = os.path.dirname(README) + os.sep
        self.assertIn(README, self.complete(shell, "%s add %sREAD" % (cairn, readme_dir)))

    def test_bash_offers_every_command_and_option(self):
        self.check_shell("bash")

    def cairnd_flags(self):
        """Every flag of `cairnd --help`."""
        out = subprocess.run([os.path.join(self.bindir, "cairnd"), "--help"], capture_output=True,
                             text=True, timeout=60).stdout
        flags = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", out))
        self.assertIn("--read-only", flags)
        return flags

    def test_cairnd_flags(self):
        """cairnd's completions, for each shell, name every flag of its --help;
        bash offers them, and the values of --log-level and --encryption."""
        markers = {"bash": "complete -F _cairnd cairnd", "zsh": "#compdef cairnd",
                   "fish": "complete -c cairnd"}
        flags = self.cairnd_flags()
        for shell, path in self.cairnd_paths().items():
            with self.subTest(shell):
                marker = markers[shell]
                with open(self.installed(path), encoding="utf-8") as f:
                    src = f.read()
                self.assertIn(marker, src)
                for flag in flags:
                    word = flag if shell != "fish" else "-l " + flag[2:]
                    self.assertTrue(re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(word), src),
                                    "%s completion of cairnd lacks %s" % (shell, flag))
        path = self.cairnd_paths()["bash"]

        def bash(*words):
            script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _cairnd; '
                      'printf "%s\\n" "${COMPREPLY[@]}"')
            proc = subprocess.run(["bash", "-c", script, "bash", path] + list(words),
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            return set(proc.stdout.split())
        self.assertEqual(bash("cairnd", "-"), flags)
        self.assertEqual(bash("cairnd", "--log-level", ""), {"error", "warn", "info", "debug"})
        self.assertEqual(bash("cairnd", "--encryption", "o"), {"on", "off"})
        self.assertEqual(bash("cairnd", "--read"), {"--read-only"})

    def test_fish_offers_every_command_and_option(self):
        self.check_shell("fish")


if __name__ == "__main__":
    ct.main()
