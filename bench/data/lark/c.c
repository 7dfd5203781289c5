int add(int a, int b) {
    return a + b;
}

int main() {
    int total = 0;
    for (int i = 0; i < 10; i = i + 1) {
        total = add(total, i * 2);
    }
    if (total > 50) {
        total = total - 1;
    }
    return total;
}
