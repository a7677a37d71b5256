"""`emulator generate -o` creates missing output directories; a file in the way is one error line."""

from emulator.cli import main


def test_generate_creates_missing_directories(tmp_path):
    prefix = tmp_path / "a" / "b" / "coll"
    assert main(["generate", "collective", "--ranks", "2", "--size", "4KiB", "-o", str(prefix)]) == 0
    assert sorted(p.name for p in prefix.parent.iterdir()) == ["coll.0.et", "coll.1.et"]


def test_generate_reports_a_file_in_the_way(tmp_path, capsys):
    (tmp_path / "a").write_text("not a directory")
    rc = main(["generate", "collective", "--ranks", "2", "--size", "4KiB", "-o", str(tmp_path / "a" / "coll")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "cannot create output directory" in err
