// SPDX-License-Identifier: LGPL-2.1-or-later
//
// A tiny TAP producer for the GJS tests: test(name, fn) runs fn, prints "ok N - name" or
// "not ok N - name" with the error, and done() prints the plan and exits non-zero on any
// failure.

const System = imports.system;

let count = 0;
let failed = 0;

var test = function (name, fn) {
    count++;
    try {
        fn();
        print(`ok ${count} - ${name}`);
    } catch (e) {
        failed++;
        print(`not ok ${count} - ${name}`);
        for (const line of `${e}\n${e.stack || ''}`.split('\n'))
            print(`# ${line}`);
    }
};

var skip = function (name, why) {
    count++;
    print(`ok ${count} - ${name} # SKIP ${why}`);
};

var assert = function (condition, message) {
    if (!condition)
        throw new Error(`assertion failed: ${message}`);
};

var assertEqual = function (actual, expected, message) {
    if (actual !== expected)
        throw new Error(`${message}: got ${actual}, expected ${expected}`);
};

// Calls fn, which must throw a GLib.Error of (domain, code); returns the error.
var assertThrows = function (domain, code, fn, message) {
    try {
        fn();
    } catch (e) {
        if (!(e instanceof imports.gi.GLib.Error))
            throw e;
        if (!e.matches(domain, code))
            throw new Error(`${message}: wrong error ${e.domain}/${e.code}: ${e.message}`);
        return e;
    }
    throw new Error(`${message}: no error`);
};

var done = function () {
    print(`1..${count}`);
    System.exit(failed > 0 ? 1 : 0);
};
