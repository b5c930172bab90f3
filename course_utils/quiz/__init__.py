"""Quizzes as data, graded the same way in a notebook and for a whole class.

One module per job, imported in this order and never back:

- `model`     the items (`Question`, `Quiz`, `Result`) and pure grading of one response;
- `files`     finding quizzes/ (package data), reading a TOML file and checking it against the schema;
- `source`    reading `answer(...)` calls out of a notebook's cells as data, never running them;
- `notebook`  `answer()`, `reveal()`, `score_summary()` and the quiz widget;
- `assignment`, `students`, `gradebook`, `cli`: grading a class (`python -m course_utils.grade`).

`from course_utils.quiz import answer, load_quiz` is all a notebook needs. The schema is in quizzes/README.md.
"""
from .files import load_quiz, parse_ref, quiz_dir, quiz_names
from .model import (Choice, Mistake, Question, Quiz, QuizFormatError, Result, UnknownQuizError)
from .notebook import Reveal, ScoreSummary, answer, markdown_html, reveal, score_summary

__all__ = ["Choice", "Mistake", "Question", "Quiz", "Result", "Reveal", "ScoreSummary", "QuizFormatError",
           "UnknownQuizError", "quiz_dir", "quiz_names", "load_quiz", "parse_ref", "answer", "reveal",
           "score_summary", "markdown_html"]
