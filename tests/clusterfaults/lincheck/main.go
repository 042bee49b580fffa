// lincheck checks a history of register operations (the fault suite's, a JSON object per line) for
// linearizability with porcupine: each key is a register starting at 0, with read, write and
// compare-and-set. An operation of unknown outcome (no answer: "ret" null) may have taken effect at
// any time after it was invoked, or never: it completes at the end of time, and a compare-and-set of
// unknown outcome applies exactly when the register held its expected value. Prints the verdict and
// exits 0 (linearizable), 1 (not: the history is illegal) or 2 (no verdict within the time limit, or
// bad input).
//
//	lincheck [-timeout 60s] [-visualize out.html] history.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Client int    `json:"client"`
	ID     string `json:"id"`
	Op     string `json:"op"`
	Key    int    `json:"key"`
	A      int    `json:"a"`
	B      int    `json:"b"`
	Call   int64  `json:"call"`
	Ret    *int64 `json:"ret"`
	Ok     *bool  `json:"ok"`
	Value  *int   `json:"value"`
}

type input struct {
	op   string
	key  int
	a, b int
}

type output struct {
	known bool
	ok    bool
	value int
}

var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		keys := []int{}
		for _, op := range history {
			k := op.Input.(input).key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := [][]porcupine.Operation{}
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() interface{} { return 0 },
	Step: func(state, in, out interface{}) (bool, interface{}) {
		s, i, o := state.(int), in.(input), out.(output)
		switch i.op {
		case "read":
			return !o.known || o.value == s, s
		case "write":
			return true, i.a
		case "cas":
			if !o.known {
				if s == i.a {
					return true, i.b
				}
				return true, s
			}
			if o.ok {
				return s == i.a, i.b
			}
			return s != i.a, s
		}
		return false, s
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		result := "?"
		if o.known {
			result = fmt.Sprintf("ok=%v value=%d", o.ok, o.value)
		}
		return fmt.Sprintf("%s k%d %d %d -> %s", i.op, i.key, i.a, i.b, result)
	},
}

func main() {
	timeout := flag.Duration("timeout", 60*time.Second, "give up (exit 2) after this long")
	visualize := flag.String("visualize", "", "write porcupine's HTML visualization here")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: lincheck [-timeout 60s] [-visualize out.html] history.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer f.Close()
	var ops []porcupine.Operation
	known, unknown := 0, 0
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; scanner.Scan(); line++ {
		var r record
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "%s line %d: %v\n", flag.Arg(0), line, err)
			os.Exit(2)
		}
		o := output{}
		ret := int64(math.MaxInt64)
		if r.Ret != nil {
			if r.Ok == nil || r.Value == nil {
				fmt.Fprintf(os.Stderr, "%s line %d: an answered operation without ok and value\n", flag.Arg(0), line)
				os.Exit(2)
			}
			o = output{known: true, ok: *r.Ok, value: *r.Value}
			ret = *r.Ret
			known++
		} else {
			unknown++
		}
		ops = append(ops, porcupine.Operation{
			ClientId: r.Client,
			Input:    input{op: r.Op, key: r.Key, a: r.A, b: r.B},
			Call:     r.Call,
			Output:   o,
			Return:   ret,
		})
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	result, info := porcupine.CheckOperationsVerbose(model, ops, *timeout)
	if *visualize != "" {
		if err := porcupine.VisualizePath(model, info, *visualize); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	fmt.Printf("%d operations (%d answered, %d of unknown outcome): %s\n", len(ops), known, unknown, result)
	switch result {
	case porcupine.Ok:
		os.Exit(0)
	case porcupine.Illegal:
		os.Exit(1)
	default:
		os.Exit(2)
	}
}
