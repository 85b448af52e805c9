"""What a framework entry point says: that fastenv serves, and at its end what it did not render."""

from fastenv.integrations._tally import Tally, announce


def test_the_end_line_counts_what_was_not_rendered_and_names_the_paths():
    tally = Tally()
    tally.add_images(stock=400, rendered=50)
    tally.add_paths([{"compiled control loop": True, "in-place reset": True}, {"compiled control loop": False, "in-place reset": True}])
    assert tally.line("X") == ("fastenv: X done: 350 of the stock env's 400 camera images not rendered (88%), 50 rendered; "
                               "fast paths serving: in-place reset; stepping aside: compiled control loop (1 of 2 envs)")
    assert Tally().line("Y") == "fastenv: Y done: 0 of the stock env's 0 camera images not rendered, 0 rendered"


def test_the_start_line_is_said_once(capsys):
    announce("entry-under-test", "it serves")
    announce("entry-under-test", "it serves")
    assert capsys.readouterr().err == "fastenv: entry-under-test: it serves\n"
