# nbgrader configuration for the course. The `trainperf` command loads this file and
# points CourseDirectory.root at a scratch folder, so nothing nbgrader writes (gradebook,
# submitted/, autograded/) lands in the repository.
c = get_config()  # noqa: F821  (provided by traitlets when the file is loaded)

c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"

c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\nraise NotImplementedError("Exercise not done yet: replace this line")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Autograding runs each notebook with its parameters cell's defaults (the quick CPU
# configuration, every cell well under 20 s on 2 cores). A cell over this limit fails.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
