#!/usr/bin/env python3
"""Counts test cases in the JUnit XML files Bazel wrote (GoogleTest cases, one per sh_test).

Usage: count_tests.py LABEL TESTLOGS_DIR NEWER_THAN_FILE
Prints failing and skipped cases, then one line "LABEL: N passed, N failed, N skipped".
"""
import os
import sys
import xml.etree.ElementTree as ET


def cases(path):
    """(name, outcome) for each test case in one test.xml; outcome is pass, fail or skip."""
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "fail"
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            outcome = "skip"
        else:
            outcome = "pass"
        yield f"{case.get('classname', '')}.{case.get('name', '')}", outcome


def fresh_xml_files(testlogs, since):
    for folder, _, files in os.walk(testlogs, followlinks=True):
        if "test.xml" in files:
            path = os.path.join(folder, "test.xml")
            if os.path.getmtime(path) >= since:
                yield path


def main():
    label, testlogs, stamp = sys.argv[1:4]
    since = os.path.getmtime(stamp)
    totals = {"pass": 0, "fail": 0, "skip": 0}
    for path in sorted(fresh_xml_files(testlogs, since)):
        target = os.path.relpath(os.path.dirname(path), testlogs)
        for name, outcome in cases(path):
            totals[outcome] += 1
            if outcome != "pass":
                print(f"  {outcome.upper()}: //{target} {name}")
    print(f"{label}: {totals['pass']} passed, {totals['fail']} failed, {totals['skip']} skipped")


if __name__ == "__main__":
    main()
