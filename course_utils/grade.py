"""`python -m course_utils.grade`: the batch grader's command line (it lives in course_utils.quiz.cli)."""
import sys

from .quiz.cli import main

if __name__ == "__main__":
    sys.exit(main())
