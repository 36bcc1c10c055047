"""The inspect stage's report (report.{json,md,html}) and its precision views."""
