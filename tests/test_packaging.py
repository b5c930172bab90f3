"""pyproject.toml, environment.yml, the README's quick start and .ci/run agree with each other."""
import re
import tomllib

import yaml

from conftest import ROOT


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {}
    for spec in project["dependencies"] + project["optional-dependencies"]["test"]:
        name, _, version = spec.partition("==")
        assert version, f"pyproject.toml: {spec!r} must be pinned with =="
        pins[_norm(name)] = version
    return pins


def _environment_pins() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            for spec in dep["pip"]:
                if not spec.startswith("-e"):
                    name, _, version = spec.partition("==")
                    pins[_norm(name)] = version
        elif not dep.startswith(("python=", "pip")) or dep.startswith("pip="):
            name, _, version = dep.partition("=")
            pins[_norm(name)] = version
    return pins


def test_pyproject_and_environment_yml_agree():
    py, conda = _pyproject_pins(), _environment_pins()
    assert py == conda, (f"only in pyproject: {sorted(set(py.items()) - set(conda.items()))}; "
                         f"only in environment.yml: {sorted(set(conda.items()) - set(py.items()))}")


def test_torch_is_pinned_to_the_cpu_wheel_on_disk():
    assert _pyproject_pins()["torch"] == "2.13.0"


def test_every_environment_line_says_why():
    text = (ROOT / "environment.yml").read_text()
    for line in text[text.index("dependencies:"):].splitlines():
        if re.match(r"\s+- [A-Za-z]", line):
            assert "#" in line, f"environment.yml: {line.strip()!r} needs a one-line comment on why it is there"


def _quick_start() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- quick-start -->\s*```bash\n(.*?)```", readme, re.S)
    assert block, "README.md must hold the quick start in a ```bash block after <!-- quick-start -->"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_readme_quick_start_is_two_commands_and_ci_runs_the_test_one():
    commands = _quick_start()
    assert len(commands) == 2, commands
    assert "notebooks/00_start_here.ipynb" in commands[0] and "jupyter lab" in commands[0]
    assert ".[test]" in commands[1] and "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "quick-start" in ci, ".ci/run must take the test command from the README's quick start"


def test_a_plain_wheel_carries_the_quizzes_and_data_as_package_data(tmp_path):
    """`pip install .` (not editable) and the course-grade script find the quizzes without the course folder."""
    import subprocess
    import sys
    import zipfile

    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path / "wheel"), str(ROOT)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for quiz in (ROOT / "quizzes").glob("*.toml"):
        assert f"course_utils/_quizzes/{quiz.name}" in names
    assert "course_utils/_quizzes/assignments/whole_course.toml" in names
    assert "course_utils/_data/sentences.json" in names
    reports = sorted((ROOT / "data" / "robustness").glob("C*.json"))
    assert reports and all(f"course_utils/_data/robustness/{r.name}" in names for r in reports)
    zipfile.ZipFile(wheel).extractall(tmp_path / "site")
    probe = ("from course_utils.quiz import quiz_dir, load_quiz; from course_utils.resources import course_folder; "
             "print(quiz_dir()); print(course_folder('data')); print(load_quiz('chapter_2_4').title)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    quizzes, data, title = done.stdout.splitlines()
    assert quizzes.startswith(str(tmp_path / "site")) and data.startswith(str(tmp_path / "site")) and title
