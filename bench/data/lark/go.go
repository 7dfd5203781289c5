package main

import "fmt"

func add(a int, b int) int {
	return a + b
}

func main() {
	total := 0
	for i := 0; i < 10; i = i + 1 {
		total = add(total, i)
	}
	fmt.Println(total)
}
