public class Counter {
    private int count;

    public Counter(int start) {
        this.count = start;
    }

    public int next() {
        count = count + 1;
        return count;
    }

    public static void main(String[] args) {
        Counter c = new Counter(0);
        for (int i = 0; i < 3; i = i + 1) {
            System.out.println(c.next());
        }
    }
}
