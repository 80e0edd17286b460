"""The ``leveled-ray`` command (:mod:`.main`) and the demo job (:mod:`.demo`)."""
